import numpy as np
import pytest

from llp_tf.after_training import propagation_baselines as pb
from tests import reference


def _clusters(rng, num_classes, per_class, dim, spread):
    """Unit rows around num_classes random centres (float32 [n, dim]) and their
    classes (int64 [n]); a larger spread mixes the classes more."""
    centres = reference.unit_rows(rng, num_classes, dim, np.float64)
    points = np.repeat(centres, per_class, axis=0) + spread * rng.standard_normal(
        (num_classes * per_class, dim)) / np.sqrt(dim)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return points.astype(np.float32), np.repeat(np.arange(num_classes), per_class)


def _labelled_first(classes, per_class):
    """bool [n]: the first per_class points of every class."""
    mask = np.zeros(len(classes), bool)
    for c in np.unique(classes):
        mask[np.flatnonzero(classes == c)[:per_class]] = True
    return mask


@pytest.fixture
def mixed():
    """Overlapping classes, so that the methods disagree on some points:
    (embeddings float32 [90, 8], labelled mask, visible labels (-1 where
    unlabelled), true classes)."""
    rng = np.random.default_rng(7)
    x, y = _clusters(rng, 3, 30, 8, spread=1.6)
    mask = _labelled_first(y, 4)
    return x, mask, np.where(mask, y, -1), y


def test_llp_is_eq_5_to_8_with_densities_over_the_drawn_set(mixed):
    x, mask, visible, _ = mixed
    k, t, tau = 4, 6, 0.1
    density = reference.local_density(x[mask], x, t, tau)
    expected, _, _ = reference.propagate(x[~mask], x[mask], visible[mask], 3, k, tau, density)
    got = pb.llp_propagation(x, mask, visible, 3, k=k, t=t, temperature=tau)
    np.testing.assert_array_equal(got[~mask], expected)
    np.testing.assert_array_equal(got[mask], visible[mask])
    # The data tell the variants apart: densities over the labelled points
    # only, or no densities at all, would give other labels.
    labelled_only = reference.local_density(x[mask], x[mask], t, tau)
    other, _, _ = reference.propagate(x[~mask], x[mask], visible[mask], 3, k, tau, labelled_only)
    plain, _, _ = reference.propagate(x[~mask], x[mask], visible[mask], 3, k, tau)
    assert np.any(other != expected) and np.any(plain != expected)


def test_weighted_knn_is_eq_5_6(mixed):
    x, mask, visible, _ = mixed
    expected, _, _ = reference.propagate(x[~mask], x[mask], visible[mask], 3, 5, 0.1)
    got = pb.weighted_knn(x, mask, visible, 3, k=5, temperature=0.1)
    np.testing.assert_array_equal(got[~mask], expected)


def _similarity_kernel(x, temperature):
    """float64 [n, n]: exp(x_i . x_j / tau) with a zero diagonal."""
    x = x.astype(np.float64)
    w = np.exp((x @ x.T - 1.0) / temperature)
    np.fill_diagonal(w, 0.0)
    return w


def _one_hot(visible, num_classes):
    y = np.zeros((len(visible), num_classes))
    known = visible >= 0
    y[known, visible[known]] = 1.0
    return y


def test_label_spreading_reaches_zhou_closed_form(mixed):
    x, mask, visible, _ = mixed
    tau, alpha = 0.1, pb.LABEL_SPREADING_ALPHA

    def closed_form(temperature):
        w = _similarity_kernel(x, temperature)
        d = 1.0 / np.sqrt(w.sum(axis=1))
        s = d[:, None] * w * d[None, :]
        return np.linalg.solve(np.eye(len(x)) - alpha * s, _one_hot(visible, 3)).argmax(axis=1)

    expected = closed_form(tau)
    got = pb.label_spreading(x, mask, visible, 3, temperature=tau)
    np.testing.assert_array_equal(got[~mask], expected[~mask])
    assert np.any(closed_form(3 * tau)[~mask] != expected[~mask])  # the scale matters


def test_label_propagation_reaches_the_harmonic_solution(mixed):
    x, mask, visible, _ = mixed
    tau = 0.1

    def harmonic(temperature):
        w = _similarity_kernel(x, temperature)
        p = w / w.sum(axis=1, keepdims=True)
        u, labelled = ~mask, mask
        f_u = np.linalg.solve(np.eye(u.sum()) - p[np.ix_(u, u)],
                              p[np.ix_(u, labelled)] @ _one_hot(visible[labelled], 3))
        return f_u.argmax(axis=1)

    expected = harmonic(tau)
    got = pb.label_propagation(x, mask, visible, 3, temperature=tau)
    np.testing.assert_array_equal(got[~mask], expected)
    assert np.any(harmonic(3 * tau) != expected)


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
    np.testing.assert_allclose(pb.dlp_graph(x, k, gamma, chunk_size=16).toarray(), wn,
                               rtol=1e-10, atol=1e-12)
    targets = _one_hot(visible, 3)
    targets /= targets.sum(axis=0, keepdims=True)  # 1 / |L_j| per class
    expected = np.linalg.solve(np.eye(len(x)) - alpha * wn, targets)
    scores = pb.dlp_class_scores(x, mask, visible, 3, k=k, gamma=gamma, alpha=alpha,
                                 max_iter=None, tol=1e-12)
    np.testing.assert_allclose(scores, expected, rtol=1e-7, atol=1e-10)
    got = pb.dlp_diffusion(x, mask, visible, 3, k=k, gamma=gamma, alpha=alpha, max_iter=None,
                           tol=1e-12)
    np.testing.assert_array_equal(got[~mask], expected[~mask].argmax(axis=1))


def test_every_method_labels_separated_clusters_right():
    rng = np.random.default_rng(1)
    x, y = _clusters(rng, 4, 30, 16, spread=0.3)
    mask = _labelled_first(y, 3)
    for method in pb.standard_methods():
        predictions = method.predict(x, mask, np.where(mask, y, -1), 4)
        assert np.mean(predictions[~mask] == y[~mask]) == 1.0, method.name
