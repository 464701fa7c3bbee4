"""Frozen-trunk features of a split, cached in memory for the linear probe.

Because the trunk is frozen and evaluation uses one centre crop, every
image's features are fixed: they are computed once per split with the
evaluation preprocessing (`pipeline.make_eval_input_fn`, padding masked out)
and kept as [N, F] float32 arrays in index order (Places205 with ResNet-50:
2.45M x 2048, about 20 GB). `standardizer` gives the training split's
per-feature mean and scale.
"""

import dataclasses
from typing import TextIO

import numpy as np
import tensorflow as tf

from llp_tf.data import Source, data_errors, pipeline
from llp_tf.models import LLPModel
from llp_tf.training.progress import EpochProgress
from llp_tf.types import Array

#: The project's global batch (the paper's 128): images per forward pass.
DEFAULT_BATCH_SIZE = 128
#: Floor of a feature's standard deviation when standardising (a constant
#: feature, e.g. a dead ReLU channel, is then left at 0 instead of NaN).
STANDARDIZE_EPSILON = 1e-6
#: Plain progress lines at most this often when output is not a terminal.
LOG_EVERY_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class FeatureSet:
    """Pooled features of one split, in index order.

    Attributes:
      features: float32 [N, F].
      labels: int64 [N], true classes.
      index: int64 [N], the examples' stable indices (sorted).
    """

    features: np.ndarray
    labels: np.ndarray
    index: np.ndarray



def extract_features(model: LLPModel, source: Source, split: str, image_size: int,
                     batch_size: int = DEFAULT_BATCH_SIZE, stream: TextIO | None = None,
                     output: str = "features") -> FeatureSet:
    """A model output of every example of a split, with the evaluation preprocessing:
    the pooled features (the probe's), or the embedding.

    Args:
      model: `LLPModel`; called with ``training=False`` (frozen: batch norm
        uses its moving statistics and nothing is updated).
      source: `llp_tf.data.Source`.
      split: "train" or "validation".
      image_size: int, side of the centre crop (the run's image size).
      batch_size: int, images per forward pass.
      stream: where progress goes (stdout when None).
      output: "features" (float32 [N, F], pooled trunk) or "embedding"
        (float32 [N, D], L2-normalised).

    Returns:
      `FeatureSet` in index order.

    Raises:
      DataError: the split is missing or an image cannot be decoded.
    """
    num_examples = source.info.num_examples(split)
    dataset = pipeline.make_eval_input_fn(source, batch_size, image_size, split=split)(None)
    steps = pipeline.eval_steps(num_examples, batch_size)

    @tf.function
    def pooled(images):
        return model(images, training=False)[output]

    progress = EpochProgress(f"{output} of {source.info.name} {split}", steps, batch_size,
                             stream=stream, log_every_seconds=LOG_EVERY_SECONDS)
    features, labels, index = [], [], []
    with data_errors():
        for step, batch in enumerate(dataset, start=1):
            mask = batch["mask"].numpy()
            features.append(pooled(batch["image"]).numpy()[mask])
            labels.append(batch["label"].numpy()[mask])
            index.append(batch["index"].numpy()[mask])
            progress.update(step, {})
    features = np.concatenate(features).astype(np.float32)
    labels = np.concatenate(labels).astype(np.int64)
    index = np.concatenate(index).astype(np.int64)
    # The evaluation order interleaves shards; index order makes the cache
    # independent of the source's storage layout.
    order = np.argsort(index, kind="stable")
    return FeatureSet(features[order], labels[order], index[order])


def standardizer(train_features: Array) -> tuple[Array, Array]:
    """Per-feature (mean, scale) of the training features, float32 [F] each.

    Apply as ``(features - mean) / scale``; ``scale`` is the standard
    deviation floored at `STANDARDIZE_EPSILON`.
    """
    values = np.asarray(train_features, np.float64)
    return (values.mean(axis=0).astype(np.float32),
            np.maximum(values.std(axis=0), STANDARDIZE_EPSILON).astype(np.float32))

