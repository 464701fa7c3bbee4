"""LLP against each other method draw by draw (`llp_minus`), and the paper's Table 5 claim in
its own terms (`table5_verdict`): LLP "comparable" to label propagation and above label
spreading. The yardstick is the spread of the paired differences over the draws:

- comparable: ``|mean(LLP - X)| <= std(LLP - X)``;
- above: ``mean > std``; below: ``mean < -std``;

with the sample std (ddof 1), so one draw decides nothing. Needs no TensorFlow."""

import dataclasses

import numpy as np

from llp_tf.after_training.transduction import protocol as protocol_lib
from llp_tf.tensor_types import Array

LLP = "local_knn"
#: Table 5's claim: LLP's relation to each of these methods.
TABLE5_CLAIM = {"label_propagation": "comparable", "label_spreading": "above"}
UNDETERMINED = "undetermined (one draw)"


def relation(mean: float, std: float, draws: int) -> str:
    """"above", "comparable" or "below" by the module's yardstick; `UNDETERMINED` for one
    draw."""
    if draws < 2:
        return UNDETERMINED
    if abs(mean) <= std:
        return "comparable"
    return "above" if mean > 0 else "below"


@dataclasses.dataclass(frozen=True)
class PairedDifference:
    """LLP's accuracy minus method ``name``'s, ``per_draw`` float64 [R] (fractions), with its
    mean, sample std and the draws LLP won, tied and lost."""

    name: str
    per_draw: Array

    @property
    def mean(self) -> float:
        """Mean difference over the draws."""
        return float(np.mean(self.per_draw))

    @property
    def std(self) -> float:
        """Sample std of the differences (0 for one draw)."""
        return float(np.std(self.per_draw, ddof=1)) if len(self.per_draw) > 1 else 0.0

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

    @property
    def relation(self) -> str:
        """LLP's `relation` to the method."""
        return relation(self.mean, self.std, len(self.per_draw))

    def as_json(self) -> dict:
        """The results file's entry."""
        return {"per_draw": [float(d) for d in self.per_draw], "mean": self.mean,
                "std": self.std, "draws_won": self.won, "draws_tied": self.tied,
                "draws_lost": self.lost, "relation": self.relation}


def llp_minus(comparison: protocol_lib.Comparison) -> tuple[PairedDifference, ...]:
    """A `PairedDifference` for every method of ``comparison`` but LLP, in its order; the
    accuracies of one draw are of the same images and labels, so they pair."""
    llp = comparison.accuracy[LLP]
    return tuple(PairedDifference(m.name, llp - comparison.accuracy[m.name])
                 for m in comparison.methods if m.name != LLP)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The claim's parts, method name -> (the relation the paper states, the one measured);
    ``holds`` when every part matches (None: a method missing, or one draw)."""

    parts: dict[str, tuple[str, str | None]]

    @property
    def holds(self) -> bool | None:
        """True when every measured relation is the paper's; None when one is unknown."""
        measured = [found for _, found in self.parts.values()]
        if any(found in (None, UNDETERMINED) for found in measured):
            return None
        return all(found == stated for stated, found in self.parts.values())

    def as_json(self) -> dict:
        """The results file's ``verdict``."""
        return {"claim": "LLP comparable to LP and above LS (paper Table 5)",
                "yardstick": "comparable: |mean(LLP - X)| <= std(LLP - X) over the draws; "
                             "above: mean > std; below: mean < -std",
                "parts": {name: {"paper": stated, "measured": found, "matches": found == stated}
                          for name, (stated, found) in self.parts.items()},
                "holds": self.holds}


def table5_verdict(differences: tuple[PairedDifference, ...]) -> Verdict:
    """The `Verdict` of Table 5's claim from `llp_minus`'s differences."""
    measured = {d.name: d.relation for d in differences}
    return Verdict({name: (stated, measured.get(name)) for name, stated in TABLE5_CLAIM.items()})
