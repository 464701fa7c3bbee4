import numpy as np
import pytest

from llp_tf.after_training.transduction import dlp_diffusion as dlp
from tests.after_training.transduction.embedding_sets import mixed_set, one_hot


@pytest.fixture
def mixed():
    """`embedding_sets.mixed_set`: overlapping classes."""
    return mixed_set()


def _dense_dlp_graph(x, k, gamma):
    """float64 [n, n]: W_n of Iscen et al. built densely."""
    x = x.astype(np.float64)
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    w = np.zeros_like(sims)
    for i in range(len(x)):
        nearest = np.argsort(-sims[i])[:k]
        w[i, nearest] = np.maximum(sims[i, nearest], 0.0) ** gamma
    w = w + w.T
    d = 1.0 / np.sqrt(w.sum(axis=1))
    return d[:, None] * w * d[None, :]


def test_dlp_graph_and_scores_match_a_dense_solve(mixed):
    x, mask, visible, _ = mixed
    k, gamma, alpha = 7, 3.0, 0.99
    wn = _dense_dlp_graph(x, k, gamma)
    np.testing.assert_allclose(dlp.dlp_graph(x, k, gamma, chunk_size=16).toarray(), wn,
                               rtol=1e-10, atol=1e-12)
    targets = one_hot(visible, 3)
    targets /= targets.sum(axis=0, keepdims=True)  # 1 / |L_j| per class
    expected = np.linalg.solve(np.eye(len(x)) - alpha * wn, targets)
    scores = dlp.dlp_class_scores(x, mask, visible, 3, k=k, gamma=gamma, alpha=alpha,
                                  max_iter=None, tol=1e-12)
    np.testing.assert_allclose(scores, expected, rtol=1e-7, atol=1e-10)
    got = dlp.dlp_diffusion(x, mask, visible, 3, k=k, gamma=gamma, alpha=alpha, max_iter=None,
                            tol=1e-12)
    np.testing.assert_array_equal(got[~mask], expected[~mask].argmax(axis=1))


def test_dlp_graph_of_three_points_by_hand():
    # Nearest neighbours: a <-> b (0.8), c -> b (0.6); a and c are orthogonal.
    x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])
    degree = np.array([1.6, 2.2, 0.6])  # rows of W + W^T
    expected = np.zeros((3, 3))
    expected[0, 1] = expected[1, 0] = 1.6 / np.sqrt(degree[0] * degree[1])
    expected[1, 2] = expected[2, 1] = 0.6 / np.sqrt(degree[1] * degree[2])
    np.testing.assert_allclose(dlp.dlp_graph(x, k=1, gamma=1.0).toarray(), expected,
                               rtol=1e-12)
    # One point has no neighbour: an empty graph.
    assert dlp.dlp_graph(x[:1]).shape == (1, 1) and dlp.dlp_graph(x[:1]).nnz == 0


@pytest.mark.parametrize("images_per_class, k", [
    (500, 50),   # CIFAR-100's class size: the release's k
    (5000, 50),  # CIFAR-10's: never above the release's k
    (50, 5),     # Table 5's protocol
    (59, 5), (20, 2), (9, 1), (2, 1),
])
def test_the_graph_neighbourhood_is_a_tenth_of_a_class(images_per_class, k):
    assert dlp.dlp_k_for(images_per_class) == k
