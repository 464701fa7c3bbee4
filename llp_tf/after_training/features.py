"""Frozen-model outputs of a split's images, one centre crop each (evaluation
preprocessing): batch by batch (`output_batches`, for the probe's disk cache) or in memory
(`extract_features`, N x F x 4 bytes); `subsample_index` limits a probe's examples."""

import dataclasses
from collections.abc import Iterator
from typing import TextIO

import numpy as np
import tensorflow as tf

from llp_tf.data.augmentation import eval_transform
from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.sources.base import Source
from llp_tf.errors import ConfigError
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training.progress import EpochProgress
from llp_tf.tensor_types import Array

#: The paper's batch of 128.
DEFAULT_BATCH_SIZE = 128
LOG_EVERY_SECONDS = 10.0
#: ``default_rng([seed, SUBSAMPLE_STREAM])`` draws a subsample, apart from the batch orders.
SUBSAMPLE_STREAM = 1_000_003


@dataclasses.dataclass(frozen=True)
class FeatureSet:
    """Features float32 [N, F] (an array or `npy_rows.NpyRows`), true labels int64 [N] and
    sorted stable indices int64 [N] of one split or a subsample of it."""

    features: Array
    labels: np.ndarray
    index: np.ndarray


def subsample_index(num_examples: int, max_examples: int | None, seed: int) -> Array | None:
    """Sorted int64 [max_examples]: a uniform draw without replacement given ``seed``; None
    (every example) when ``max_examples`` is None or at least N. ConfigError: not positive."""
    if max_examples is None:
        return None
    if isinstance(max_examples, bool) or not isinstance(max_examples, (int, np.integer)) or \
            max_examples <= 0:
        raise ConfigError(f"max_train_examples must be a positive integer (got "
                          f"{max_examples!r}).")
    if max_examples >= num_examples:
        return None
    rng = np.random.default_rng([int(seed), SUBSAMPLE_STREAM])
    return np.sort(rng.choice(int(num_examples), int(max_examples), replace=False)).astype(
        np.int64)


def example_batches(source: Source, split: str, image_size: int, batch_size: int,
                    index: Array | None = None) -> tf.data.Dataset:
    """Batches {"image": float32 [b, S, S, 3], "label": int64 [b], "index": int64 [b]} of a
    split (only ``index``'s examples when given) in storage order, with the evaluation
    preprocessing; iterate inside `data_errors()`."""
    records = source.records(split, cycle_length=1)
    if index is not None:
        keep = np.zeros(source.info.num_examples(split), bool)
        keep[index] = True
        keep = tf.constant(keep)
        records = records.filter(lambda record: tf.gather(keep, record["index"]))

    def element(record, image):
        return {"image": eval_transform.eval_preprocess(image, image_size),
                "label": record["label"], "index": record["index"]}

    examples = source.decode(records, split).map(element, num_parallel_calls=tf.data.AUTOTUNE,
                                                 deterministic=True)
    return examples.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def output_batches(model: EmbeddingClassifier, source: Source, split: str, image_size: int,
                   batch_size: int = DEFAULT_BATCH_SIZE, index: Array | None = None,
                   output: str = "features",
                   stream: TextIO | None = None) -> Iterator[tuple[Array, Array, Array]]:
    """(index int64 [b], labels int64 [b], outputs float32 [b, F]) per batch of a split,
    the model called with ``training=False``; progress on ``stream``.
    DataError: the split is missing or an image cannot be decoded."""
    source.require_split(split)
    count = source.info.num_examples(split) if index is None else len(index)
    dataset = example_batches(source, split, image_size, batch_size, index)
    signature = [tf.TensorSpec([None, image_size, image_size, 3], tf.float32)]

    @tf.function(input_signature=signature)
    def outputs(images):
        return model(images, training=False)[output]

    progress = EpochProgress(f"{output} of {source.info.name} {split}",
                             -(-count // batch_size), batch_size, stream=stream,
                             log_every_seconds=LOG_EVERY_SECONDS)
    with data_errors():
        for step, batch in enumerate(dataset, start=1):
            values = outputs(batch["image"]).numpy().astype(np.float32, copy=False)
            yield batch["index"].numpy().astype(np.int64), \
                batch["label"].numpy().astype(np.int64), values
            progress.update(step, {})


def extract_features(model: EmbeddingClassifier, source: Source, split: str, image_size: int,
                     batch_size: int = DEFAULT_BATCH_SIZE, stream: TextIO | None = None,
                     output: str = "features", index: Array | None = None) -> FeatureSet:
    """`FeatureSet` in memory of a split's (or ``index``'s) "features" (pooled, [N, F]) or
    "embedding" (unit rows, [N, D])."""
    selected = np.arange(source.info.num_examples(split)) if index is None else index
    features, labels = None, np.zeros(len(selected), np.int64)
    for batch_index, batch_labels, values in output_batches(
            model, source, split, image_size, batch_size, index, output, stream):
        if features is None:
            features = np.zeros((len(selected), values.shape[1]), np.float32)
        rows = np.searchsorted(selected, batch_index)
        features[rows], labels[rows] = values, batch_labels
    return FeatureSet(features, labels, np.asarray(selected, np.int64))
