"""The run metrics, each defined once: evaluation logs them and analysis reads them.

- per batch, for evaluation on the validation split: the number of real
  (unmasked) examples whose label is the softmax top-1 or among the top-k
  classes (`top_k_count`), or the true class of the nearest bank row
  (`nearest_neighbour_count`); evaluation sums them over the split and
  divides by the number of real examples;
- per bank state: the pseudo-label statistics on the unlabelled rows
  (`pseudo_label_stats`) and the aggregation score of each class
  (`aggregation_scores`; their mean is ``aggregation_score`` in
  ``metrics.jsonl``).

Edge conventions: with no unlabelled row of known true class (every example
labelled) the pseudo-label statistics are NaN and evaluation leaves them out
of ``metrics.jsonl``; with no pseudo-labelled row (warm-up) coverage and
accuracy are 0 and so is the mean confidence (coverage 0 already says that
there is none, and 0 keeps the logged value a number). A class with no row
has a NaN score and is left out of the mean.
"""

import dataclasses
import math

import numpy as np
import tensorflow as tf

from llp_tf.core import label_encoding, propagation
from llp_tf.types import Array, BoolTensor, FloatTensor, IntTensor

# Rows summed per chunk: bounds the float64 copy of a million-row bank.
SUM_CHUNK_ROWS = 65536


def _masked_sum(hits, mask):
    """float32 []: the sum of ``hits`` over the rows where ``mask`` is set."""
    return tf.reduce_sum(tf.cast(mask, tf.float32) * tf.cast(hits, tf.float32))


def top_k_count(logits: FloatTensor, labels: IntTensor, mask: BoolTensor | FloatTensor,
                k: int) -> FloatTensor:
    """float32 []: real examples whose label is among the ``k`` largest logits.

    Args:
      logits: float32 [B, C].
      labels: int [B] in [0, C).
      mask: bool or float [B]: 1 (True) for a real example, 0 for padding
        (the evaluation input repeats an example to fill its last batch).
      k: int; more than C counts every example (top-5 of fewer classes).

    Ties: top-1 takes the first largest logit (`tf.argmax`), as the
    logged ``top1`` always has; for k > 1 a tie at the k-th value counts as
    a hit (`tf.math.in_top_k`).
    """
    labels = tf.cast(labels, tf.int64)
    if k == 1:
        hits = tf.equal(tf.argmax(logits, axis=1), labels)
    else:
        # in_top_k counts the logits larger than the label's, so k >= C
        # needs no cap: every example is a hit.
        hits = tf.math.in_top_k(labels, logits, int(k))
    return _masked_sum(hits, mask)


def nearest_neighbour_count(embeddings: FloatTensor, bank: FloatTensor,
                            bank_true_labels: IntTensor, labels: IntTensor,
                            mask: BoolTensor | FloatTensor) -> FloatTensor:
    """float32 []: real examples whose nearest bank row has their true class.

    Args:
      embeddings: float32 [B, D], unit rows.
      bank: float32 [N, D], the bank rows.
      bank_true_labels: int64 [N], the true class of each row (-1 where
        unknown, which matches no label).
      labels: int [B], the examples' classes.
      mask: bool or float [B], as in `top_k_count`.
    """
    _, nearest = propagation.nearest_rows(embeddings, bank, 1)
    neighbour_labels = tf.gather(bank_true_labels, nearest[:, 0])
    return _masked_sum(tf.equal(neighbour_labels, tf.cast(labels, tf.int64)), mask)


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
    def mean(self) -> float:
        """float: the mean score over the classes that have rows (NaN if none)."""
        present = self.counts > 0
        return float(np.mean(self.per_class[present])) if present.any() else math.nan


def aggregation_scores(embeddings: FloatTensor | Array, classes: IntTensor | Array,
                       num_classes: int) -> AggregationScores:
    """Per-class aggregation scores: ``|| mean of the rows of class c ||_2``.

    Args:
      embeddings: float [N, D], the (unit-norm) bank rows.
      classes: int [N], the class of each row; rows whose value is not a
        class (`label_encoding.is_class`: -1 for unknown, or an instance id)
        are left out.
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
        known = label_encoding.is_class_np(chunk, num_classes)
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
        still holding an instance id count as wrong).
      confidence: float, the mean confidence of the pseudo-labelled ones
        (0 if none: coverage 0 already says there are none).

    With ``unlabeled`` 0 (every row labelled) the three fractions are NaN.
    """

    unlabeled: int
    coverage: float
    accuracy: float
    confidence: float


def pseudo_label_stats(bank_labels: IntTensor | Array, confidence: FloatTensor | Array,
                       is_labeled: BoolTensor | Array, true_classes: Array,
                       num_classes: int) -> PseudoLabelStats:
    """`PseudoLabelStats` of a bank state.

    Args:
      bank_labels: int64 [N], the bank's labels (`label_encoding`: a class,
        or an instance id where nothing has been propagated yet).
      confidence: float32 [N], the bank's confidences.
      is_labeled: bool [N], True for the labelled examples.
      true_classes: int64 [N], each row's true class, -1 where unknown (such
        rows are left out).
      num_classes: int, C.

    Returns:
      `PseudoLabelStats` (Python floats, computed in numpy).
    """
    bank_labels = np.asarray(bank_labels)
    true_classes = np.asarray(true_classes)
    confidence = np.asarray(confidence)
    unlabeled = ~np.asarray(is_labeled, bool) & (true_classes >= 0)
    has_class = label_encoding.is_class_np(bank_labels, num_classes)
    if not unlabeled.any():
        return PseudoLabelStats(0, math.nan, math.nan, math.nan)
    pseudo = unlabeled & has_class
    return PseudoLabelStats(
        unlabeled=int(unlabeled.sum()),
        coverage=float(np.mean(has_class[unlabeled])),
        accuracy=float(np.mean(bank_labels[unlabeled] == true_classes[unlabeled])),
        confidence=float(np.mean(confidence[pseudo])) if pseudo.any() else 0.0)
