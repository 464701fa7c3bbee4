"""An epoch's running totals: loops of `StepRecords` added give the means over all their steps,
a subset mean the ratio of its numerators' and weights' means, against float64 numpy."""

import numpy as np
import pytest

from llp_tf.training.epoch_totals import EpochTotals
from llp_tf.training.step_metrics import Mean, StepRecords, SubsetMean

PHASES = [{"loss": Mean}, {"loss": Mean, "confidence": SubsetMean}]


def _loop(rng, steps, weights):
    return StepRecords({"loss": rng.uniform(0, 2, steps).astype(np.float32),
                        "confidence": rng.uniform(0, 1, steps).astype(np.float32)},
                       {"confidence": np.asarray(weights, np.float32)})


def test_loops_add_up_to_the_epochs_means():
    totals = EpochTotals(PHASES)
    assert set(totals.sums) == set(totals.counts) == {"loss", "confidence"}
    assert set(totals.weights) == {"confidence"}
    rng = np.random.default_rng(0)
    loops = [_loop(rng, 3, [0.5, 0.0, 0.25]), _loop(rng, 2, [1.0, 0.75])]
    for loop in loops:
        totals.add(loop)
    joined = {part: {name: np.concatenate([getattr(loop, part)[name] for loop in loops])
                     .astype(np.float64) for name in getattr(loops[0], part)}
              for part in ("values", "weights")}
    means = totals.means(["loss", "confidence"])
    assert list(means) == ["loss", "confidence"]
    assert means["loss"] == pytest.approx(joined["values"]["loss"].mean(), rel=1e-12)
    assert means["confidence"] == pytest.approx(
        joined["values"]["confidence"].sum() / joined["weights"]["confidence"].sum(), rel=1e-12)
    totals.reset()
    assert totals.means(["loss", "confidence"]) == {}
    assert float(totals.weights["confidence"].numpy()) == 0.0


def test_a_subset_mean_over_no_row_is_left_out():
    totals = EpochTotals(PHASES)
    totals.add(_loop(np.random.default_rng(1), 2, [0.0, 0.0]))
    assert list(totals.means(["loss", "confidence"])) == ["loss"]


def test_a_name_of_two_kinds_is_refused():
    with pytest.raises(ValueError, match="confidence is a Mean in one phase and a SubsetMean"):
        EpochTotals([{"confidence": Mean}, {"confidence": SubsetMean}])
