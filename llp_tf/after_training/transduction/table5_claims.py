"""The paper's two claims beside its Table 5, tested on paired draws as the paper words them
(its paragraph "Comparison to global propagation"): LLP's performance "is comparable to that of
the global propagation algorithm used in DMT" and "only slightly lower than that of DLP". It
claims nothing about LS or LP, so nothing is tested about them.

Each claim names a range for the true mean difference mu = LLP - X (accuracy fractions) and
is decided by the two one-sided paired t-tests at 5% (TOST), that is by the 90% Student-t
interval of the mean difference:

- comparable: mu in (-MARGIN, +MARGIN), `COMPARABLE_MARGIN`;
- slightly lower: mu in (-GAP, 0), `SLIGHT_GAP`.

The claim holds when the interval lies inside its range, does not hold when it misses the
range, and is not resolved otherwise (one draw never resolves). The margins were fixed before
any comparison was run; docs/after-training.md says why. Needs no TensorFlow."""

import dataclasses
import enum

import numpy as np
import scipy.stats

from llp_tf.after_training.transduction.paired_differences import PairedDifference

#: Each one-sided test's level; the decision interval's confidence is 1 - 2 ALPHA.
ALPHA = 0.05
#: "Comparable": within one accuracy point. The paper calls a 0.1-point gap comparable and a
#: 1.1-point gap "slightly lower", so its boundary lies in (0.1, 1.1]; 1 point is also under
#: half the smallest per-draw std of its Table 5 (2.2 points).
COMPARABLE_MARGIN = 0.01
#: "Slightly lower": by less than 2.2 points, the smallest per-draw std of the paper's Table 5
#: (a gap inside one draw's spread); the paper's own gap to DLP is 1.1.
SLIGHT_GAP = 0.022


class Answer(str, enum.Enum):
    """A claim's outcome on the draws."""

    HOLDS = "holds"
    DOES_NOT_HOLD = "does not hold"
    NOT_RESOLVED = "not resolved"


@dataclasses.dataclass(frozen=True)
class Claim:
    """That the true mean of LLP minus ``method`` lies in the open range (``low``, ``high``);
    ``words`` are the paper's, ``name`` its short form."""

    method: str
    paper_name: str
    name: str
    words: str
    low: float
    high: float

    def range_text(self) -> str:
        """The range in accuracy points, "(-1.0, +1.0)"."""
        return f"({100 * self.low:+.1f}, {100 * self.high:+.1f}) points"


CLAIMS = (
    Claim("lp_dmt", "LP_DMT", "comparable to LP_DMT",
          "comparable to that of the global propagation algorithm used in DMT",
          -COMPARABLE_MARGIN, COMPARABLE_MARGIN),
    Claim("dlp", "DLP", "slightly lower than DLP", "only slightly lower than that of DLP",
          -SLIGHT_GAP, 0.0),
)


def _one_sided_p(difference: PairedDifference, bound: float, above: bool) -> float | None:
    """p of the paired t-test of H0: mu <= bound (``above``: H1 mu > bound) or H0: mu >= bound;
    None when the differences have no spread (or one draw)."""
    if difference.standard_error == 0 or difference.draws < 2:
        return None
    statistic = (difference.mean - bound) / difference.standard_error
    dof = difference.draws - 1
    return float(scipy.stats.t.sf(statistic, dof) if above else scipy.stats.t.cdf(statistic, dof))


@dataclasses.dataclass(frozen=True)
class Finding:
    """A `Claim` tested on one `PairedDifference`."""

    claim: Claim
    difference: PairedDifference

    @property
    def interval(self) -> tuple[float, float]:
        """The decision interval: 90% Student-t, the two one-sided 5% tests."""
        return self.difference.interval(1 - 2 * ALPHA)

    @property
    def answer(self) -> Answer:
        """HOLDS: the interval inside the claim's range; DOES_NOT_HOLD: outside it."""
        low, high = self.interval
        if not (np.isfinite(low) and np.isfinite(high)):
            return Answer.NOT_RESOLVED
        if self.claim.low < low and high < self.claim.high:
            return Answer.HOLDS
        if high <= self.claim.low or low >= self.claim.high:
            return Answer.DOES_NOT_HOLD
        return Answer.NOT_RESOLVED

    def p_values(self) -> dict[str, float | None]:
        """The two one-sided tests' p: mu above the range's low end, below its high end."""
        return {"above_low": _one_sided_p(self.difference, self.claim.low, above=True),
                "below_high": _one_sided_p(self.difference, self.claim.high, above=False)}

    def as_json(self) -> dict:
        """The results file's entry of the claim."""
        low, high = self.interval
        finite = bool(np.isfinite(low) and np.isfinite(high))
        return {"paper_words": self.claim.words, "method": self.claim.method,
                "range": [self.claim.low, self.claim.high],
                "mean": self.difference.mean,
                "ci90": [float(low), float(high)] if finite else None,
                "p_values": self.p_values(), "draws_won": self.difference.won,
                "draws": self.difference.draws, "answer": self.answer.value}


def decide_claims(differences: tuple[PairedDifference, ...]) -> tuple[Finding, ...]:
    """A `Finding` for every claim whose method is among ``differences``."""
    by_name = {d.name: d for d in differences}
    return tuple(Finding(claim, by_name[claim.method]) for claim in CLAIMS
                 if claim.method in by_name)


def rule_json() -> dict:
    """How the claims are decided, for the results file."""
    return {"test": "two one-sided paired t-tests (TOST), each at alpha = "
                    f"{ALPHA:g}: the {100 * (1 - 2 * ALPHA):g}% Student-t interval of the mean "
                    "difference inside the claim's range holds, missing it does not hold, "
                    "else not resolved",
            "claims": {c.name: {"method": c.method, "paper_words": c.words,
                                "range": [c.low, c.high]} for c in CLAIMS},
            "not_tested": "the paper claims nothing about LS or LP; their differences are "
                          "reported only"}
