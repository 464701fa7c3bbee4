import inspect
import warnings

import numpy as np
import pytest
from sklearn.semi_supervised import LabelPropagation, LabelSpreading

from llp_tf.after_training.transduction import rbf_graph_propagation as rbf
from llp_tf.errors import ConfigError
from tests.after_training.transduction.embedding_sets import mixed_set


@pytest.fixture
def mixed():
    """`embedding_sets.mixed_set`: overlapping classes."""
    return mixed_set()


def _row_normalised(scores):
    return scores / scores.sum(axis=1, keepdims=True)


def test_the_defaults_are_scikit_learns_gamma_and_zhous_alpha():
    for model in (LabelSpreading, LabelPropagation):
        assert inspect.signature(model).parameters["gamma"].default == rbf.SKLEARN_RBF_GAMMA == 20
    assert rbf.ZHOU_LABEL_SPREADING_ALPHA == 0.99


def test_label_spreading_is_scikit_learns_iteration_run_to_its_fixed_point(mixed):
    x, mask, visible, _ = mixed
    # scikit-learn's iteration, run until a step changes the scores by less than 1e-13 in
    # total (at alpha = 0.99 that takes a few thousand steps); its fixed point is
    # (1 - alpha) (I - alpha S)^-1 Y, which row normalisation makes ours.
    model = LabelSpreading(kernel="rbf", gamma=20.0, alpha=0.99, max_iter=20_000, tol=1e-13)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.fit(x.astype(np.float64), visible)
    ours = rbf.label_spreading_scores(x, mask, visible, 3, gamma=20.0, alpha=0.99)
    # The remaining error is at most the last change over 1 - alpha: 1e-11.
    np.testing.assert_allclose(_row_normalised(ours), model.label_distributions_, atol=1e-9)


def test_label_propagation_is_scikit_learns_iteration_run_to_its_fixed_point(mixed):
    x, mask, visible, _ = mixed
    # gamma = 5, not 20: scikit-learn keeps the self-loops exp(0) = 1, which at gamma = 20
    # outweigh these spread points' other weights (exp(-20 * 1.6) = 1e-14 at the median
    # squared distance) so much that its iteration barely moves. The harmonic solution is the
    # same with or without self-loops.
    model = LabelPropagation(kernel="rbf", gamma=5.0, max_iter=100_000, tol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.fit(x.astype(np.float64), visible)
    ours = rbf.label_propagation_scores(x, mask, visible, 3, gamma=5.0)
    np.testing.assert_allclose(ours[mask], np.eye(3)[visible[mask]])
    np.testing.assert_allclose(ours, model.label_distributions_, atol=1e-9)


def test_far_apart_points_by_hand_where_every_weight_underflows():
    # On a line: x1 at squared distance 1.0 from x0 (class 0) and 1.2 from x2 (class 1).
    # At gamma = 1000 every weight, e^-1000 or smaller, is 0 in float64 (so D^-1 W would be
    # 0 / 0); in log space both solutions are finite.
    x = np.array([[0.0, 0.0], [1.0, 0.0], [1.0 + np.sqrt(1.2), 0.0]])
    mask, labels = np.array([True, False, True]), np.array([0, -1, 1])
    assert np.all(np.exp(-1000.0 * np.array([1.0, 1.2])) == 0.0)
    # Harmonic: x1's scores are its two weights normalised, (1, e^-200) / (1 + e^-200). The
    # squared distances |a|^2 + |b|^2 - 2 a.b carry a rounding of a few ulps of 4.4 (1e-15),
    # times gamma 1e-12 in the exponent.
    scores = rbf.label_propagation_scores(x, mask, labels, 2, gamma=1000.0)
    ratio = np.exp(-200.0)
    np.testing.assert_allclose(scores[1], [1.0 / (1.0 + ratio), ratio / (1.0 + ratio)],
                               rtol=1e-10)
    # Spreading: S_01 = w01 / sqrt(d0 d1) = 1 up to e^-200, S_12 = e^-1200 / e^-1100 = e^-100,
    # S_02 = 0: x0 and x1 form a pair, (I - a S) restricted to it is [[1, -a], [-a, 1]], so
    # x0 scores 1 / (1 - a^2) and x1 a / (1 - a^2) for class 0, and x2 (0, 1).
    alpha = 0.5
    spread = rbf.label_spreading_scores(x, mask, labels, 2, gamma=1000.0, alpha=alpha)
    np.testing.assert_allclose(spread[:, 0], [1 / (1 - alpha**2), alpha / (1 - alpha**2), 0.0],
                               rtol=1e-10, atol=1e-40)
    np.testing.assert_allclose(spread[2], [0.0, 1.0], rtol=1e-10, atol=1e-40)
    assert 0.0 < spread[1, 1] < 1e-40


def test_log_affinity_is_minus_gamma_times_the_squared_distance():
    x = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    expected = -2.5 * np.array([[0.0, 0.8, 2.0], [0.8, 0.0, 0.4], [2.0, 0.4, 0.0]])
    np.fill_diagonal(expected, -np.inf)
    np.testing.assert_allclose(rbf.log_rbf_affinity(x, 2.5), expected, rtol=1e-12, atol=1e-15)


def test_alpha_outside_zero_one_is_refused(mixed):
    x, mask, visible, _ = mixed
    with pytest.raises(ConfigError, match=r"alpha must lie in \(0, 1\), got 1.0"):
        rbf.label_spreading_scores(x, mask, visible, 3, gamma=20.0, alpha=1.0)
