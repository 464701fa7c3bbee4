import numpy as np
import pytest

from llp_tf.after_training.transduction import paired_differences as paired
from llp_tf.after_training.transduction.methods import PropagationMethod
from llp_tf.after_training.transduction.protocol import Comparison

# Student-t quantiles from the printed tables: t(0.975; 3) and t(0.95; 3).
T_975_3 = 3.182446305284
T_95_3 = 2.353363434802


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
    assert (lp.draws, lp.won, lp.tied, lp.lost) == (4, 1, 1, 2)
    ls = differences["label_spreading"]
    assert ls.mean == 10 / 64 and ls.std == pytest.approx(np.sqrt(80 / 4096 / 3), rel=1e-15)
    assert (ls.won, ls.tied, ls.lost) == (4, 0, 0)
    knn = differences["knn"]
    assert (knn.mean, knn.std, knn.won, knn.tied) == (0.0, 0.0, 0, 4)
    assert knn.interval(0.95) == (0.0, 0.0)


def test_the_interval_is_student_t_over_the_paired_draws(comparison):
    lp = {d.name: d for d in paired.llp_minus(comparison)}["label_propagation"]
    half = np.sqrt(44 / 4096 / 3) / 2  # std / sqrt(4)
    for confidence, quantile in ((0.95, T_975_3), (0.90, T_95_3)):
        low, high = lp.interval(confidence)
        assert low == pytest.approx(-1 / 64 - quantile * half, rel=1e-9)
        assert high == pytest.approx(-1 / 64 + quantile * half, rel=1e-9)
    as_json = lp.as_json()
    assert as_json["ci95"] == pytest.approx([-1 / 64 - T_975_3 * half, -1 / 64 + T_975_3 * half],
                                            rel=1e-9)
    assert {key: as_json[key] for key in ("per_draw", "mean", "draws_won", "draws_tied",
                                          "draws_lost")} == {
        "per_draw": [0.0625, -0.0625, -0.0625, 0.0], "mean": -1 / 64, "draws_won": 1,
        "draws_tied": 1, "draws_lost": 2}


def test_one_draw_has_no_interval():
    one = paired.llp_minus(_comparison({"local_knn": [0.9], "dlp": [0.5]}))[0]
    assert one.std == 0.0 and one.interval(0.95) == (-np.inf, np.inf)
    assert one.as_json()["ci95"] is None
