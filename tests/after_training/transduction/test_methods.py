import numpy as np
import pytest

from llp_tf.after_training.transduction import dlp_diffusion, methods
from tests import reference
from tests.after_training.transduction.embedding_sets import (clusters, labelled_first, mixed_set,
                                                              one_hot)


@pytest.fixture
def mixed():
    """`embedding_sets.mixed_set`: overlapping classes."""
    return mixed_set()


def test_llp_is_eq_5_to_8_with_densities_over_the_drawn_set(mixed):
    x, mask, visible, _ = mixed
    k, t, tau = 4, 6, 0.1
    density = reference.local_density(x[mask], x, t, tau)
    expected, _, _ = reference.propagate(x[~mask], x[mask], visible[mask], 3, k, tau, density)
    got = methods.llp_propagation(x, mask, visible, 3, k=k, t=t, temperature=tau)
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
    got = methods.weighted_knn(x, mask, visible, 3, k=5, temperature=0.1)
    np.testing.assert_array_equal(got[~mask], expected)


def _similarity_kernel(x, temperature):
    """float64 [n, n]: exp(x_i . x_j / tau) with a zero diagonal."""
    x = x.astype(np.float64)
    w = np.exp((x @ x.T - 1.0) / temperature)
    np.fill_diagonal(w, 0.0)
    return w


def test_label_spreading_reaches_zhou_closed_form(mixed):
    x, mask, visible, _ = mixed
    tau, alpha = 0.1, methods.LABEL_SPREADING_ALPHA

    def closed_form(temperature):
        w = _similarity_kernel(x, temperature)
        d = 1.0 / np.sqrt(w.sum(axis=1))
        s = d[:, None] * w * d[None, :]
        return np.linalg.solve(np.eye(len(x)) - alpha * s, one_hot(visible, 3)).argmax(axis=1)

    expected = closed_form(tau)
    got = methods.label_spreading(x, mask, visible, 3, temperature=tau)
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
                              p[np.ix_(u, labelled)] @ one_hot(visible[labelled], 3))
        return f_u.argmax(axis=1)

    expected = harmonic(tau)
    got = methods.label_propagation(x, mask, visible, 3, temperature=tau)
    np.testing.assert_array_equal(got[~mask], expected)
    assert np.any(harmonic(3 * tau) != expected)


def test_the_dlp_method_is_the_diffusion_module_s():
    dlp = {method.name: method for method in methods.standard_methods()}["dlp"]
    assert dlp.predict is dlp_diffusion.dlp_diffusion and dlp_diffusion.DLP_K == 50
    assert (dlp_diffusion.DLP_GAMMA, dlp_diffusion.DLP_ALPHA, dlp_diffusion.DLP_MAX_ITER,
            dlp_diffusion.DLP_TOLERANCE) == (3.0, 0.99, 20, 1e-6)


def test_every_method_labels_separated_clusters_right():
    rng = np.random.default_rng(1)
    x, y = clusters(rng, 4, 30, 16, spread=0.3)
    mask = labelled_first(y, 3)
    for method in methods.standard_methods():
        predictions = method.predict(x, mask, np.where(mask, y, -1), 4)
        assert np.mean(predictions[~mask] == y[~mask]) == 1.0, method.name
