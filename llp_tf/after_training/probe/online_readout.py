"""The paper's probe protocol: every SGD step of the readout on the frozen trunk's
(``training=False``) features of a batch of freshly augmented training images (the training
pipeline with the run's augmentation; seeded); validation on the cached centre crops."""

import sys
from collections.abc import Callable
from typing import TextIO

import numpy as np
import tensorflow as tf

from llp_tf.after_training.features import FeatureSet, subsample_index
from llp_tf.after_training.probe.readout import (LinearReadout, ProbeResult, ProbeSettings,
                                                 check_features, probe_result, run_epochs)
from llp_tf.counted_nouns import counted
from llp_tf.data.config import MIN_CROP_AREA, PAPER
from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.pipeline import input_fns
from llp_tf.data.sources.base import TRAIN, Source
from llp_tf.errors import ConfigError
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.tensor_types import Array, FloatTensor

#: images float32 [B, S, S, 3] -> pooled features float32 [B, F].
FeaturesFn = Callable[[FloatTensor], FloatTensor]


def online_batches(source: Source, batch_size: int, image_size: int, seed: int, epoch: int,
                   used_index: Array | None = None, augmentation: str = PAPER,
                   min_crop_area: float = MIN_CROP_AREA) -> tf.data.Dataset:
    """The augmented batches {"image": float32 [B, S, S, 3], "label": int64 [B], "index":
    int64 [B]} of the probe's epoch ``epoch`` (1-based), every example labelled."""
    return input_fns.make_train_input_fn(
        source, batch_size, image_size, seed, epoch - 1, used_index=used_index,
        augmentation=augmentation, min_crop_area=min_crop_area,
        labelled_index=np.arange(source.info.num_train))(None)


def frozen_features_fn(model: EmbeddingClassifier, image_size: int) -> FeaturesFn:
    """tf.function images float32 [B, S, S, 3] -> pooled features float32 [B, F]."""
    signature = [tf.TensorSpec([None, image_size, image_size, 3], tf.float32)]

    @tf.function(input_signature=signature)
    def features_fn(images):
        return model(images, training=False)["features"]

    return features_fn


def online_epoch(readout: LinearReadout, features_fn: FeaturesFn, dataset: tf.data.Dataset,
                 on_step: Callable[[int, float], None] | None = None) -> tuple[float, float]:
    """(mean batch loss, top-1) of one pass of SGD steps of ``readout`` over ``dataset``
    (`online_batches`), each batch measured before its step."""
    losses, hits, seen = [], 0.0, 0
    with data_errors():
        for batch in dataset:
            labels = tf.cast(batch["label"], tf.int64)
            loss, correct = readout.train_step(features_fn(batch["image"]), labels)
            losses.append(loss)
            hits, seen = hits + correct, seen + int(labels.shape[0])
            if on_step is not None:
                on_step(len(losses), float(np.mean(losses)))
    if not losses:
        raise ConfigError("The online readout's epoch had no batch; lower --batch_size.")
    return float(np.mean(losses)), hits / seen


def train_online_readout(model: EmbeddingClassifier, source: Source, validation: FeatureSet,
                         num_classes: int, image_size: int,
                         settings: ProbeSettings = ProbeSettings(),
                         augmentation: str = PAPER,
                         min_crop_area: float = MIN_CROP_AREA,
                         stream: TextIO | None = None,
                         description: str = "readout") -> tuple[LinearReadout, ProbeResult]:
    """(`LinearReadout`, `ProbeResult`) of a readout trained online through the frozen
    ``model`` on ``source``'s train split; ``validation`` holds the centre crops' features.
    ConfigError: bad settings, no validation examples, divergence."""
    stream = stream or sys.stdout
    if settings.standardize:
        raise ConfigError("standardize applies to the cached protocol only.")
    check_features(validation, num_classes, "validation")
    source.require_split(TRAIN)
    used_index = subsample_index(source.info.num_train, settings.max_train_examples,
                                 settings.seed)
    num_used = source.info.num_train if used_index is None else len(used_index)
    steps = input_fns.steps_per_epoch(num_used, settings.batch_size)
    if steps == 0:
        raise ConfigError(f"The batch size {settings.batch_size} is larger than the "
                          f"{counted(num_used, 'training example')}; an online epoch would have "
                          "no step.")
    readout = LinearReadout(validation.features.shape[1], num_classes, settings.learning_rate,
                            settings.momentum)
    features_fn = frozen_features_fn(model, image_size)
    last = {}

    def epoch_fn(epoch, on_step):
        dataset = online_batches(source, settings.batch_size, image_size, settings.seed, epoch,
                                 used_index, augmentation, min_crop_area)
        last["loss"], last["top1"] = online_epoch(readout, features_fn, dataset, on_step)
        return last["loss"]

    record = run_epochs(readout, settings, steps, epoch_fn, validation, stream, description)
    return readout, probe_result(readout, record, validation, last, num_classes)
