"""Frozen-trunk outputs of a split's images: the batches, and an in-memory extraction.

Because the trunk is frozen and evaluation uses one centre crop, every
image's features are fixed: they are computed once per split with the
evaluation preprocessing (`eval_transform.eval_preprocess`). `output_batches`
yields them batch by batch; the linear probe writes them to a disk cache
(`llp_tf.after_training.probe.feature_cache`), whose memory does not grow with
the number of images, while `extract_features` gathers them into [N, F]
arrays in memory (N x F x 4 bytes: for embeddings of a few splits, not for
Places205's 2.45M x 2048 features, about 20 GB).

`subsample_index` picks the examples of a split that a probe uses when it is
limited to a number of them; only those images are decoded.
"""

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

#: The project's global batch (the paper's 128): images per forward pass.
DEFAULT_BATCH_SIZE = 128
#: Plain progress lines at most this often when output is not a terminal.
LOG_EVERY_SECONDS = 10.0
#: The stream of ``numpy.random.default_rng([seed, stream])`` that draws a
#: subsample (distinct from the readout's batch orders, seeded [seed, epoch]).
SUBSAMPLE_STREAM = 1_000_003


@dataclasses.dataclass(frozen=True)
class FeatureSet:
    """Pooled features of one split (or of a subsample of it), in index order.

    Attributes:
      features: float32 [N, F]: an array, or the rows of a cache file
        (`llp_tf.after_training.probe.npy_rows.NpyRows`, read on demand).
      labels: int64 [N], true classes.
      index: int64 [N], the examples' stable indices (sorted).
    """

    features: Array
    labels: np.ndarray
    index: np.ndarray


def subsample_index(num_examples: int, max_examples: int | None, seed: int) -> Array | None:
    """The examples a probe limited to ``max_examples`` uses: a uniform draw
    without replacement, deterministic given ``seed``.

    Returns:
      sorted int64 [min(max_examples, N)], or None (every example) when
      ``max_examples`` is None or at least N.

    Raises:
      ConfigError: ``max_examples`` is not a positive integer.
    """
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
    """Batches of a split's images with the evaluation preprocessing.

    Records are read in storage order (shard after shard: index order for
    folder, TFDS and embedded sources), so consecutive examples land in
    consecutive rows of a cache. With ``index``, the other records are
    dropped before their images are read.

    Args:
      source: `Source`.
      split: "train" or "validation".
      image_size: int S, side of the centre crop.
      batch_size: int B; the last batch may be smaller.
      index: optional sorted int64 [M], the examples to keep.

    Returns:
      tf.data.Dataset of {"image": float32 [b, S, S, 3], "label": int64 [b],
      "index": int64 [b]}. Iterate it inside `data_errors()`.
    """
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
    """A model output of the examples of a split, batch by batch (see `example_batches`).

    The model is called with ``training=False`` (frozen: batch norm uses its
    moving statistics and nothing is updated). Progress goes to ``stream``
    (stdout when None) as "<output> of <dataset> <split>".

    Yields:
      (index int64 [b], labels int64 [b], outputs float32 [b, F]) per batch,
      in storage order; every selected example exactly once.

    Raises:
      DataError: the split is missing or an image cannot be decoded.
    """
    source.require_split(split)
    count = source.info.num_examples(split) if index is None else len(index)
    dataset = example_batches(source, split, image_size, batch_size, index)
    signature = [tf.TensorSpec([None, image_size, image_size, 3], tf.float32)]

    @tf.function(input_signature=signature)  # one trace for full and last batches
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
    """A model output of every example of a split (or of ``index``), in memory:
    the pooled features, or the embedding (see `output_batches`).

    Args:
      output: "features" (float32 [N, F], pooled trunk) or "embedding"
        (float32 [N, D], L2-normalised).
      index: optional sorted int64 [M], the examples to compute.

    Returns:
      `FeatureSet` in index order.
    """
    selected = np.arange(source.info.num_examples(split)) if index is None else index
    features, labels = None, np.zeros(len(selected), np.int64)
    for batch_index, batch_labels, values in output_batches(
            model, source, split, image_size, batch_size, index, output, stream):
        if features is None:
            features = np.zeros((len(selected), values.shape[1]), np.float32)
        rows = np.searchsorted(selected, batch_index)
        features[rows], labels[rows] = values, batch_labels
    return FeatureSet(features, labels, np.asarray(selected, np.int64))
