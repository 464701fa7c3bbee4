import numpy as np
import pytest

from llp_tf.after_training.transduction import paired_differences as paired
from llp_tf.after_training.transduction.methods import PropagationMethod
from llp_tf.after_training.transduction.protocol import Comparison


def _comparison(accuracy):
    """A `Comparison` of the given accuracies per draw, method name -> list."""
    methods = tuple(PropagationMethod(name, name, lambda *args: None) for name in accuracy)
    return Comparison(methods=methods,
                      accuracy={name: np.array(values) for name, values in accuracy.items()},
                      seconds={name: 0.0 for name in accuracy})


# Accuracies in sixteenths (exact in binary) over four draws.
LLP = [14, 12, 10, 12]
LP = [13, 13, 11, 12]     # LLP - LP: 1, -1, -1, 0 (/16)
LS = [10, 10, 9, 9]       # LLP - LS: 4, 2, 1, 3
KNN = [14, 12, 10, 12]    # the same as LLP


def _sixteenths(values):
    return [v / 16 for v in values]


@pytest.fixture
def comparison():
    return _comparison({"local_knn": _sixteenths(LLP), "knn": _sixteenths(KNN),
                        "label_spreading": _sixteenths(LS),
                        "label_propagation": _sixteenths(LP)})


def test_llp_minus_each_method_draw_by_draw(comparison):
    differences = {d.name: d for d in paired.llp_minus(comparison)}
    assert list(differences) == ["knn", "label_spreading", "label_propagation"]
    lp = differences["label_propagation"]
    np.testing.assert_array_equal(lp.per_draw, np.array([1, -1, -1, 0]) / 16)
    # mean -1/64; sample std: deviations 5, -3, -3, 1 (/64), squares 44/4096 over 3.
    assert lp.mean == -1 / 64
    assert lp.std == pytest.approx(np.sqrt(44 / 4096 / 3), rel=1e-15)
    assert (lp.won, lp.tied, lp.lost, lp.relation) == (1, 1, 2, "comparable")
    ls = differences["label_spreading"]
    # mean 10/64, std: deviations 6, -2, -6, 2 (/64): 80/4096 over 3 -> 0.0807 < 0.156.
    assert ls.mean == 10 / 64 and ls.std == pytest.approx(np.sqrt(80 / 4096 / 3), rel=1e-15)
    assert (ls.won, ls.tied, ls.lost, ls.relation) == (4, 0, 0, "above")
    knn = differences["knn"]
    assert (knn.mean, knn.std, knn.won, knn.tied, knn.relation) == (0.0, 0.0, 0, 4, "comparable")
    assert lp.as_json() == {"per_draw": [0.0625, -0.0625, -0.0625, 0.0], "mean": -1 / 64,
                            "std": lp.std, "draws_won": 1, "draws_tied": 1, "draws_lost": 2,
                            "relation": "comparable"}


def test_the_claim_holds_when_lp_is_comparable_and_ls_below_llp(comparison):
    verdict = paired.table5_verdict(paired.llp_minus(comparison))
    assert verdict.parts == {"label_propagation": ("comparable", "comparable"),
                             "label_spreading": ("above", "above")}
    assert verdict.holds is True
    assert verdict.as_json()["parts"]["label_spreading"] == {"paper": "above",
                                                             "measured": "above",
                                                             "matches": True}


def test_the_claim_fails_when_lp_wins_every_draw():
    # LP beats LLP by 2/16 in each draw but one (by 1/16): mean -7/64, std 1/32 -> below.
    comparison = _comparison({"local_knn": _sixteenths(LLP),
                              "label_spreading": _sixteenths(LS),
                              "label_propagation": _sixteenths([16, 14, 12, 13])})
    differences = paired.llp_minus(comparison)
    lp = differences[1]
    assert lp.name == "label_propagation" and lp.mean == -7 / 64 and lp.relation == "below"
    assert (lp.won, lp.lost) == (0, 4)
    verdict = paired.table5_verdict(differences)
    assert verdict.holds is False
    assert verdict.parts["label_propagation"] == ("comparable", "below")


@pytest.mark.parametrize("mean, std, draws, expected", [
    (0.02, 0.02, 10, "comparable"),    # on the boundary: within one std
    (-0.02, 0.02, 10, "comparable"),
    (0.021, 0.02, 10, "above"),
    (-0.021, 0.02, 10, "below"),
    (0.0, 0.0, 10, "comparable"),      # identical in every draw
    (0.05, 0.0, 1, paired.UNDETERMINED),
])
def test_relation_is_the_mean_against_one_std(mean, std, draws, expected):
    assert paired.relation(mean, std, draws) == expected


def test_one_draw_or_a_missing_method_leaves_the_claim_undetermined():
    one_draw = _comparison({"local_knn": [0.9], "label_spreading": [0.5],
                            "label_propagation": [0.9]})
    assert paired.table5_verdict(paired.llp_minus(one_draw)).holds is None
    without_ls = _comparison({"local_knn": [0.9, 0.8], "label_propagation": [0.9, 0.8]})
    verdict = paired.table5_verdict(paired.llp_minus(without_ls))
    assert verdict.parts["label_spreading"] == ("above", None) and verdict.holds is None
