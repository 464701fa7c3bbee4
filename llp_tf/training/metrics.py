"""The run metrics, each defined once: evaluation logs them and analysis reads them.

- per batch, for evaluation on the validation split: softmax top-1 and
  top-k hits (`top_k_hits`) and nearest-neighbour top-1 hits through the
  bank (`nearest_neighbour_hits`), as float32 [B] of 0/1 weighted by a mask;
- per bank state: the pseudo-label statistics on the unlabelled rows
  (`pseudo_label_stats`) and the aggregation score of each class
  (`aggregation_scores`; their mean is ``aggregation_score`` in
  ``metrics.jsonl``).

Edge conventions: with no unlabelled row (every example labelled) the
pseudo-label statistics are NaN and evaluation leaves them out; with no
pseudo-labelled row (warm-up) the mean confidence is 0. A class with no row
has a NaN score and is left out of the mean.
"""

import dataclasses
import math

import numpy as np
import tensorflow as tf

from llp_tf.core import label_encoding, propagation

# Rows summed per chunk: bounds the float64 copy of a million-row bank.
SUM_CHUNK_ROWS = 65536


def top_k_hits(logits, labels, k):
    """float32 [B]: 1 where ``labels`` is among the ``k`` largest ``logits``.

    Args:
      logits: float [B, C]; labels: int64 [B] in [0, C); k: int (capped at C).
      Ties are broken as `tf.math.in_top_k` does (a tie at the k-th value
      counts as a hit); top-1 uses argmax (the first maximum).
    """
    labels = tf.cast(labels, tf.int64)
    if k == 1:
        return tf.cast(tf.equal(tf.argmax(logits, axis=1), labels), tf.float32)
    k = min(int(k), int(logits.shape[-1]))
    return tf.cast(tf.math.in_top_k(labels, logits, k), tf.float32)


def nearest_neighbour_hits(embeddings, bank, bank_true_labels, labels):
    """float32 [B]: 1 where the true class of the nearest bank row is ``labels``.

    Args:
      embeddings: float32 [B, D]; bank: float32 [N, D];
      bank_true_labels: int64 [N], the true class of each row (-1 unknown);
      labels: int64 [B].
    """
    _, nearest = propagation.nearest_rows(embeddings, bank, 1)
    neighbour_labels = tf.gather(bank_true_labels, nearest[:, 0])
    return tf.cast(tf.equal(neighbour_labels, tf.cast(labels, tf.int64)), tf.float32)


@dataclasses.dataclass(frozen=True)
class AggregationScores:
    """Per-class aggregation scores of one set of rows.

    Attributes:
      per_class: float64 [C], the score of each class; NaN for a class with
        no row.
      counts: int64 [C], rows of each class.
    """

    per_class: np.ndarray
    counts: np.ndarray

    @property
    def mean(self):
        """float: the mean score over the classes that have rows (NaN if none)."""
        present = self.counts > 0
        return float(np.mean(self.per_class[present])) if present.any() else math.nan


def aggregation_scores(embeddings, classes, num_classes):
    """Per-class aggregation scores: ``|| mean of the rows of class c ||_2``.

    Args:
      embeddings: float [N, D], the (unit-norm) bank rows.
      classes: int [N], the class of each row; rows whose value is outside
        ``[0, C)`` (unknown, or an instance id) are left out.
      num_classes: int, C.

    Returns:
      `AggregationScores`, computed in float64.
    """
    embeddings = np.asarray(embeddings)
    classes = np.asarray(classes, np.int64).reshape(-1)
    if embeddings.ndim != 2 or embeddings.shape[0] != classes.size:
        raise ValueError(f"embeddings must be [N, D] with N = {classes.size} classes given; "
                         f"got shape {embeddings.shape}.")
    sums = np.zeros((num_classes, embeddings.shape[1]), np.float64)
    counts = np.zeros(num_classes, np.int64)
    for start in range(0, classes.size, SUM_CHUNK_ROWS):
        chunk = classes[start:start + SUM_CHUNK_ROWS]
        known = (chunk >= 0) & (chunk < num_classes)
        rows = embeddings[start:start + SUM_CHUNK_ROWS][known].astype(np.float64)
        np.add.at(sums, chunk[known], rows)
        counts += np.bincount(chunk[known], minlength=num_classes)
    per_class = np.full(num_classes, np.nan)
    present = counts > 0
    per_class[present] = np.linalg.norm(sums[present] / counts[present, None], axis=1)
    return AggregationScores(per_class=per_class, counts=counts)


@dataclasses.dataclass(frozen=True)
class PseudoLabelStats:
    """The bank's pseudo labels on its unlabelled rows, against their true classes.

    Attributes:
      unlabeled: int, unlabelled rows with a known true class.
      coverage: float, the fraction of them that carry a class (not an
        instance id).
      accuracy: float, the fraction whose label is their true class (rows
        still holding an instance id count as wrong, as in `Evaluator`);
        NaN when there is no unlabelled row.
      confidence: float, the mean confidence of the pseudo-labelled ones
        (0 if none: coverage 0 already says there are none).
    """

    unlabeled: int
    coverage: float
    accuracy: float
    confidence: float


def pseudo_label_stats(bank_labels, confidence, is_labeled, true_classes, num_classes):
    """`PseudoLabelStats` of a bank state (all arrays [N], numpy)."""
    unlabeled = ~np.asarray(is_labeled, bool) & (np.asarray(true_classes) >= 0)
    has_class = label_encoding.is_class_np(bank_labels, num_classes)
    if not unlabeled.any():
        return PseudoLabelStats(0, math.nan, math.nan, math.nan)
    pseudo = unlabeled & has_class
    return PseudoLabelStats(
        unlabeled=int(unlabeled.sum()),
        coverage=float(np.mean(has_class[unlabeled])),
        accuracy=float(np.mean(bank_labels[unlabeled] == true_classes[unlabeled])),
        confidence=float(np.mean(confidence[pseudo])) if pseudo.any() else 0.0)
