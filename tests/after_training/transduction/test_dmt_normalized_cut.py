import numpy as np
import pytest

from llp_tf.after_training.transduction import dmt_normalized_cut as dmt
from tests.after_training.transduction.embedding_sets import clusters, labelled_first


@pytest.fixture
def small_set():
    """Three overlapping classes of 12 unit points in 6-D; 3 labelled a class."""
    rng = np.random.default_rng(3)
    x, y = clusters(rng, 3, 12, 6, spread=1.2)
    mask = labelled_first(y, 3)
    return x, mask, np.where(mask, y, -1), y


def _graph(x, k):
    """float64 [n, n]: the release's kNN graph by loops: d = (1 - cos) / 2, the k nearest
    other points, exp(-d / d_k), then (A + A^T) / 2."""
    x = x.astype(np.float64)
    n = len(x)
    a = np.zeros((n, n))
    for i in range(n):
        d = np.array([(1.0 - x[i] @ x[j]) / 2.0 if j != i else np.inf for j in range(n)])
        nearest = np.argsort(d)[:k]
        for j in nearest:
            a[i, j] = np.exp(-d[j] / d[nearest[-1]])
    return (a + a.T) / 2.0


def _prior(degree, mask, visible, num_classes):
    """float64 [n, C]: the release's balanced prior, column by column."""
    prior = np.zeros((len(mask), num_classes))
    for c in range(num_classes):
        positive = mask & (visible == c)
        negative = mask & (visible != c)
        ratio = degree[positive].sum() / degree[negative].sum()
        column = np.zeros(len(mask))
        column[positive] = np.sqrt(degree[positive] / ratio)
        column[negative] = -np.sqrt(degree[negative] * ratio)
        prior[:, c] = column / np.linalg.norm(column)
    return prior


def test_the_graph_is_the_release_s_knn_graph_with_its_local_scale(small_set):
    x = small_set[0]
    for k in (4, 35, 500):  # 500 > n - 1: every other point
        np.testing.assert_allclose(dmt.dmt_graph(x, k=k).toarray(), _graph(x, min(k, 35)),
                                   rtol=1e-12, atol=0)


def test_the_scores_are_the_laplacian_s_pseudo_inverse_on_the_prior_with_every_eigenvector(
        small_set):
    x, mask, visible, _ = small_set
    n = len(x)
    w = _graph(x, 8)
    degree = w.sum(axis=1)
    laplacian = np.eye(n) - w / np.sqrt(np.outer(degree, degree))
    # A connected graph: L's null space is the first eigenvector alone, so keeping all the
    # others gives the pseudo-inverse.
    scores = np.linalg.pinv(laplacian) @ _prior(degree, mask, visible, 3)
    expected = scores / np.linalg.norm(scores, axis=0) * np.sqrt(n)
    got = dmt.dmt_class_scores(x, mask, visible, 3, k=8, eigenvectors=n)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9 * np.abs(expected).max())


def test_fewer_eigenvectors_keep_only_the_smallest(small_set):
    x, mask, visible, _ = small_set
    n = len(x)
    w = _graph(x, 8)
    degree = w.sum(axis=1)
    values, vectors = np.linalg.eigh(np.eye(n) - w / np.sqrt(np.outer(degree, degree)))
    values, vectors = values[1:6], vectors[:, 1:6]
    scores = vectors @ np.diag(1 / values) @ vectors.T @ _prior(degree, mask, visible, 3)
    expected = scores / np.linalg.norm(scores, axis=0) * np.sqrt(n)
    got = dmt.dmt_class_scores(x, mask, visible, 3, k=8, eigenvectors=6)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9 * np.abs(expected).max())
    predictions = dmt.dmt_normalized_cut(x, mask, visible, 3, k=8, eigenvectors=6)
    np.testing.assert_array_equal(predictions[~mask], expected[~mask].argmax(axis=1))
    np.testing.assert_array_equal(predictions[mask], visible[mask])


def test_the_prior_weighs_each_class_s_positive_and_negative_parts_by_degree():
    degree = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    mask = np.array([True, True, True, False, False])
    visible = np.array([0, 1, 1, -1, -1])
    np.testing.assert_allclose(dmt.balanced_prior(degree, mask, visible, 2),
                               _prior(degree, mask, visible, 2), rtol=1e-14)
    # A class with no labelled point: a zero column, never a division by zero.
    prior = dmt.balanced_prior(degree, mask, visible, 3)
    np.testing.assert_array_equal(prior[:, 2], 0.0)


def test_the_default_sizes_are_von_luxburg_s_rules():
    assert [dmt.default_k(n) for n in (1, 2, 500, 2500, 151_517)] == [1, 1, 7, 8, 12]
    assert [dmt.default_eigenvectors(c) for c in (1, 2, 10, 50)] == [2, 2, 10, 50]


@pytest.mark.parametrize("spread", [0.3, 0.6])
def test_separated_classes_are_labelled_right_at_the_default_sizes(spread):
    # Six classes of 40; the graph of K = ceil(ln 240) = 6 falls apart into the six classes
    # at spread 0.3 (six zero eigenvalues: the release's "drop the first computed" would drop
    # an arbitrary mix of them and lose a class), into four components at 0.6.
    rng = np.random.default_rng(5)
    x, y = clusters(rng, 6, 40, 16, spread=spread)
    mask = labelled_first(y, 2)
    predictions = dmt.dmt_normalized_cut(x, mask, np.where(mask, y, -1), 6)
    np.testing.assert_array_equal(predictions, y)


def test_the_release_s_sizes_link_a_small_draw_whole_and_lose_it():
    # K = 500 on 240 points is the complete graph, and 200 of 240 eigenvectors the bulk of
    # the spectrum: why the defaults are not the release's (module docstring).
    rng = np.random.default_rng(5)
    x, y = clusters(rng, 6, 40, 16, spread=0.3)
    mask = labelled_first(y, 2)
    predictions = dmt.dmt_normalized_cut(x, mask, np.where(mask, y, -1), 6,
                                         k=dmt.RELEASE_K, eigenvectors=dmt.RELEASE_EIGENVECTORS)
    assert np.mean(predictions[~mask] == y[~mask]) < 0.9
