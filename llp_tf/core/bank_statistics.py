"""Statistics of a memory bank's state, for evaluation and the embedding analysis: per-class
aggregation scores and the pseudo labels of the unlabelled rows against their true classes.
A statistic that does not apply (no unlabelled row, nothing propagated yet, a class with no
row) is NaN."""

import dataclasses
import math

import numpy as np

from llp_tf.core import label_encoding
from llp_tf.core.bank import BankRows
from llp_tf.tensor_types import Array, BoolTensor, FloatTensor, IntTensor

# Rows summed per chunk: bounds the float64 copy of a million-row bank.
SUM_CHUNK_ROWS = 65536


@dataclasses.dataclass(frozen=True)
class AggregationScores:
    """Per-class aggregation scores: ``per_class`` float64 [C] (NaN for a class with no row) and
    ``counts`` int64 [C], rows of each class."""

    per_class: np.ndarray
    counts: np.ndarray

    @property
    def mean(self) -> float:
        """float: the mean score over the classes that have rows (NaN if none)."""
        present = self.counts > 0
        return float(np.mean(self.per_class[present])) if present.any() else math.nan


def aggregation_scores(embeddings: FloatTensor | Array, classes: IntTensor | Array,
                       num_classes: int) -> AggregationScores:
    """`AggregationScores` of ``|| mean of the rows of class c ||_2``, in float64.

    Args:
      embeddings: float [N, D], the (unit-norm) bank rows.
      classes: int [N]; a row whose value is not a class (-1, an instance id) is left out.
      num_classes: int, C."""
    return scores_of_sums(*class_sums(embeddings, classes, num_classes))


def class_sums(embeddings: FloatTensor | Array, classes: IntTensor | Array,
               num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(float64 [C, D] sum, int64 [C] count) of the rows of each class (arguments as
    `aggregation_scores`'); the sums of disjoint sets of rows add up."""
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
    return sums, counts


def scores_of_sums(sums: np.ndarray, counts: np.ndarray) -> AggregationScores:
    """`AggregationScores` of `class_sums`' (sums [C, D], counts [C])."""
    per_class = np.full(counts.shape, np.nan)
    present = counts > 0
    per_class[present] = np.linalg.norm(sums[present] / counts[present, None], axis=1)
    return AggregationScores(per_class=per_class, counts=np.asarray(counts, np.int64))


@dataclasses.dataclass(frozen=True)
class PseudoLabelStats:
    """The pseudo labels of the unlabelled rows of known true class (``unlabelled``, int):
    ``coverage``, the fraction that carry a class; ``accuracy``, the fraction whose label is
    their true class; ``confidence``, the mean confidence of the pseudo-labelled ones."""

    unlabelled: int
    coverage: float
    accuracy: float
    confidence: float


def pseudo_label_stats(bank_labels: IntTensor | Array, confidence: FloatTensor | Array,
                       is_labelled: BoolTensor | Array, true_classes: Array,
                       num_classes: int) -> PseudoLabelStats:
    """`PseudoLabelStats` (Python floats) of a bank state.

    Args:
      bank_labels: int64 [N] (`label_encoding`); confidence: float32 [N].
      is_labelled: bool [N]; true_classes: int64 [N], -1 where unknown (left out).
      num_classes: int, C."""
    return stats_of_counts(pseudo_label_counts(bank_labels, confidence, is_labelled,
                                               true_classes, num_classes))


def pseudo_label_counts(bank_labels: IntTensor | Array, confidence: FloatTensor | Array,
                        is_labelled: BoolTensor | Array, true_classes: Array,
                        num_classes: int) -> np.ndarray:
    """float64 [4]: of the unlabelled rows of known true class, their count, those with a
    class, those with their true class, and the confidence summed over those with a class
    (arguments as `pseudo_label_stats`'); the counts of disjoint sets of rows add up."""
    bank_labels = np.asarray(bank_labels)
    true_classes = np.asarray(true_classes)
    unlabelled = ~np.asarray(is_labelled, bool) & (true_classes >= 0)
    pseudo = unlabelled & label_encoding.is_class_np(bank_labels, num_classes)
    # The confidences summed in their own dtype, as np.mean sums them.
    return np.array([unlabelled.sum(), pseudo.sum(),
                     (unlabelled & (bank_labels == true_classes)).sum(),
                     np.sum(np.asarray(confidence)[pseudo])], np.float64)


def stats_of_counts(counts: np.ndarray) -> PseudoLabelStats:
    """`PseudoLabelStats` of `pseudo_label_counts`' [4]."""
    unlabelled, pseudo, correct, confidence = (float(value) for value in counts)
    if not unlabelled:
        return PseudoLabelStats(0, math.nan, math.nan, math.nan)
    if not pseudo:
        return PseudoLabelStats(int(unlabelled), 0.0, math.nan, math.nan)
    # The mean confidence rounded to float32, the confidences' dtype.
    return PseudoLabelStats(unlabelled=int(unlabelled), coverage=pseudo / unlabelled,
                            accuracy=correct / unlabelled,
                            confidence=float(np.float32(confidence / pseudo)))


#: The groupings of rows `held_sums` can sum: by true class, by the bank's own label, and
#: every row as one class.
GROUPINGS = ("true", "own", "every_row")


@dataclasses.dataclass(frozen=True)
class HeldSums:
    """Sums over a bank's held rows that add up across disjoint rows (workers): the
    `pseudo_label_counts` ``label_counts`` float64 [4], and per grouping of `GROUPINGS` asked
    for, `class_sums`' (float64 [C, D] sums, int64 [C] counts; C = 1 for "every_row")."""

    label_counts: np.ndarray
    groups: dict[str, tuple[np.ndarray, np.ndarray]]


def held_sums(bank: BankRows, true_classes: Array, num_classes: int,
              groupings: tuple[str, ...] = ("true",)) -> HeldSums:
    """`HeldSums` of the rows ``bank`` holds (`BankRows.held_rows`) for ``groupings``, read
    `SUM_CHUNK_ROWS` rows at a time (`BankRows.held_blocks`); ``true_classes`` int64 [N] over all
    N rows, -1 where unknown."""
    label_counts = np.zeros(4)
    sizes = {"true": num_classes, "own": num_classes, "every_row": 1}
    groups = {name: (np.zeros((sizes[name], bank.dim)), np.zeros(sizes[name], np.int64))
              for name in groupings}
    names = ("embeddings", "labels", "confidence", "is_labelled")
    for first, rows in bank.held_blocks(names, SUM_CHUNK_ROWS):
        true = np.asarray(true_classes)[first:first + len(rows["labels"])]
        label_counts += pseudo_label_counts(rows["labels"], rows["confidence"],
                                            rows["is_labelled"], true, num_classes)
        classes = {"true": true, "own": rows["labels"], "every_row": np.zeros_like(true)}
        for name, (sums, counts) in groups.items():
            block_sums, block_counts = class_sums(rows["embeddings"], classes[name],
                                                  sizes[name])
            sums += block_sums
            counts += block_counts
    return HeldSums(label_counts=label_counts, groups=groups)
