"""Statistics of a memory bank's state, defined once: evaluation logs them and
the embedding analysis reads them.

- `aggregation_scores`: per class, the L2 norm of the mean of its rows
  (their mean over classes is ``aggregation_score`` in ``metrics.jsonl``);
- `pseudo_label_stats`: the pseudo labels of the unlabelled rows against
  their true classes.

Edge conventions: with no unlabelled row of known true class (every example
labelled) the pseudo-label statistics are NaN; with no pseudo-labelled row
(the warm-up, before the first propagation) coverage is 0 and accuracy and
mean confidence are NaN, as they do not apply yet. Evaluation leaves the
three out of ``metrics.jsonl`` in both cases. A class with no row has a NaN
score and is left out of the mean.
"""

import dataclasses
import math

import numpy as np

from llp_tf.core import label_encoding
from llp_tf.tensor_types import Array, BoolTensor, FloatTensor, IntTensor

# Rows summed per chunk: bounds the float64 copy of a million-row bank.
SUM_CHUNK_ROWS = 65536


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
      unlabelled: int, unlabelled rows with a known true class.
      coverage: float, the fraction of them that carry a class (not an
        instance id).
      accuracy: float, the fraction whose label is their true class (rows
        still holding an instance id count as wrong).
      confidence: float, the mean confidence of the pseudo-labelled ones.

    With ``unlabelled`` 0 (every row labelled) the three fractions are NaN;
    with no pseudo-labelled row (nothing propagated yet), accuracy and
    confidence are.
    """

    unlabelled: int
    coverage: float
    accuracy: float
    confidence: float


def pseudo_label_stats(bank_labels: IntTensor | Array, confidence: FloatTensor | Array,
                       is_labelled: BoolTensor | Array, true_classes: Array,
                       num_classes: int) -> PseudoLabelStats:
    """`PseudoLabelStats` of a bank state.

    Args:
      bank_labels: int64 [N], the bank's labels (`label_encoding`: a class,
        or an instance id where nothing has been propagated yet).
      confidence: float32 [N], the bank's confidences.
      is_labelled: bool [N], True for the labelled examples.
      true_classes: int64 [N], each row's true class, -1 where unknown (such
        rows are left out).
      num_classes: int, C.

    Returns:
      `PseudoLabelStats` (Python floats, computed in numpy).
    """
    bank_labels = np.asarray(bank_labels)
    true_classes = np.asarray(true_classes)
    confidence = np.asarray(confidence)
    unlabelled = ~np.asarray(is_labelled, bool) & (true_classes >= 0)
    has_class = label_encoding.is_class_np(bank_labels, num_classes)
    if not unlabelled.any():
        return PseudoLabelStats(0, math.nan, math.nan, math.nan)
    pseudo = unlabelled & has_class
    if not pseudo.any():
        return PseudoLabelStats(int(unlabelled.sum()), 0.0, math.nan, math.nan)
    return PseudoLabelStats(
        unlabelled=int(unlabelled.sum()),
        coverage=float(np.mean(has_class[unlabelled])),
        accuracy=float(np.mean(bank_labels[unlabelled] == true_classes[unlabelled])),
        confidence=float(np.mean(confidence[pseudo])))
