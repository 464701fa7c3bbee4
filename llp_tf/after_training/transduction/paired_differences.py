"""LLP against each other method draw by draw (`llp_minus`): the accuracies of one draw are of
the same images and labels, so they pair. Each `PairedDifference` reports its mean, sample
std, Student-t confidence interval and the draws won, tied and lost; what the paper claims
about two of them is `table5_claims`'. Needs no TensorFlow."""

import dataclasses

import numpy as np
import scipy.stats

from llp_tf.after_training.transduction import protocol as protocol_lib
from llp_tf.tensor_types import Array

LLP = "local_knn"
#: The confidence of the interval every difference reports.
REPORTED_CONFIDENCE = 0.95


@dataclasses.dataclass(frozen=True)
class PairedDifference:
    """LLP's accuracy minus method ``name``'s, ``per_draw`` float64 [R] (fractions)."""

    name: str
    per_draw: Array

    @property
    def draws(self) -> int:
        """R, the number of paired draws."""
        return len(self.per_draw)

    @property
    def mean(self) -> float:
        """Mean difference over the draws."""
        return float(np.mean(self.per_draw))

    @property
    def std(self) -> float:
        """Sample std of the differences (ddof 1; 0 for one draw)."""
        return float(np.std(self.per_draw, ddof=1)) if self.draws > 1 else 0.0

    @property
    def standard_error(self) -> float:
        """std / sqrt(R)."""
        return self.std / np.sqrt(self.draws)

    def interval(self, confidence: float) -> tuple[float, float]:
        """The two-sided Student-t interval of the mean difference at ``confidence``, with R - 1
        degrees of freedom; (-inf, inf) for one draw."""
        if self.draws < 2:
            return -np.inf, np.inf
        half = scipy.stats.t.ppf(0.5 + confidence / 2, self.draws - 1) * self.standard_error
        return self.mean - half, self.mean + half

    @property
    def won(self) -> int:
        """Draws where LLP scored higher."""
        return int(np.sum(self.per_draw > 0))

    @property
    def tied(self) -> int:
        """Draws where both scored the same."""
        return int(np.sum(self.per_draw == 0))

    @property
    def lost(self) -> int:
        """Draws where LLP scored lower."""
        return int(np.sum(self.per_draw < 0))

    def as_json(self) -> dict:
        """The results file's entry (a one-draw interval is null)."""
        low, high = self.interval(REPORTED_CONFIDENCE)
        finite = self.draws > 1
        return {"per_draw": [float(d) for d in self.per_draw], "mean": self.mean,
                "std": self.std, "ci95": [float(low), float(high)] if finite else None,
                "draws_won": self.won, "draws_tied": self.tied, "draws_lost": self.lost}


def llp_minus(comparison: protocol_lib.Comparison) -> tuple[PairedDifference, ...]:
    """A `PairedDifference` for every method of ``comparison`` but LLP, in its order."""
    llp = comparison.accuracy[LLP]
    return tuple(PairedDifference(m.name, llp - comparison.accuracy[m.name])
                 for m in comparison.methods if m.name != LLP)
