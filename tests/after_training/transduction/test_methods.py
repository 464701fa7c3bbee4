import numpy as np
import pytest

from llp_tf.after_training.transduction import dlp_diffusion, dmt_normalized_cut, methods
from llp_tf.errors import ConfigError
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


def _rbf_kernel(x, gamma):
    """float64 [n, n]: exp(-gamma |x_i - x_j|^2) with a zero diagonal."""
    x = x.astype(np.float64)
    w = np.exp(-gamma * np.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=2))
    np.fill_diagonal(w, 0.0)
    return w


def test_label_spreading_is_zhou_closed_form_at_scikit_learns_gamma_and_zhous_alpha(mixed):
    x, mask, visible, _ = mixed

    def closed_form(gamma, alpha):
        w = _rbf_kernel(x, gamma)
        d = 1.0 / np.sqrt(w.sum(axis=1))
        s = d[:, None] * w * d[None, :]
        return np.linalg.solve(np.eye(len(x)) - alpha * s, one_hot(visible, 3)).argmax(axis=1)

    expected = closed_form(20.0, 0.99)
    got = methods.label_spreading(x, mask, visible, 3)
    np.testing.assert_array_equal(got[~mask], expected[~mask])
    np.testing.assert_array_equal(got[mask], visible[mask])
    # The data tell the settings apart: scikit-learn's own alpha, or LLP's similarity scale
    # (gamma = 1 / (2 tau)) that the tool used before, give other labels.
    assert np.any(closed_form(20.0, 0.2)[~mask] != expected[~mask])
    assert np.any(closed_form(1 / 0.14, 0.99)[~mask] != expected[~mask])


def test_label_propagation_is_the_harmonic_solution_at_scikit_learns_gamma(mixed):
    x, mask, visible, _ = mixed

    def harmonic(gamma):
        w = _rbf_kernel(x, gamma)
        p = w / w.sum(axis=1, keepdims=True)
        u, labelled = ~mask, mask
        f_u = np.linalg.solve(np.eye(u.sum()) - p[np.ix_(u, u)],
                              p[np.ix_(u, labelled)] @ one_hot(visible[labelled], 3))
        return f_u.argmax(axis=1)

    expected = harmonic(20.0)
    got = methods.label_propagation(x, mask, visible, 3)
    np.testing.assert_array_equal(got[~mask], expected)
    assert np.any(harmonic(1 / 0.14) != expected)


def test_the_dlp_method_is_the_diffusion_module_s_at_the_k_it_is_given(mixed):
    x, mask, visible, _ = mixed
    dlp = {method.name: method for method in methods.standard_methods(dlp_k=7)}["dlp"]
    assert dlp.title == "DLP diffusion (k=7)"
    expected = dlp_diffusion.dlp_diffusion(x, mask, visible, 3, k=7)
    np.testing.assert_array_equal(dlp.predict(x, mask, visible, 3), expected)
    assert np.any(dlp_diffusion.dlp_diffusion(x, mask, visible, 3, k=50)[~mask]
                  != expected[~mask])
    assert (dlp_diffusion.DLP_GAMMA, dlp_diffusion.DLP_ALPHA, dlp_diffusion.DLP_MAX_ITER,
            dlp_diffusion.DLP_TOLERANCE) == (3.0, 0.99, 20, 1e-6)


def test_the_lp_dmt_method_is_the_normalized_cut_module_s_at_its_settings(mixed):
    x, mask, visible, _ = mixed
    lp_dmt = {m.name: m for m in methods.standard_methods(dmt_k=9, dmt_eigenvectors=12)}["lp_dmt"]
    assert lp_dmt.title == "DMT normalized cut (K=9, 12 eig.)"
    expected = dmt_normalized_cut.dmt_normalized_cut(x, mask, visible, 3, k=9, eigenvectors=12)
    np.testing.assert_array_equal(lp_dmt.predict(x, mask, visible, 3), expected)
    assert (dmt_normalized_cut.RELEASE_K, dmt_normalized_cut.RELEASE_EIGENVECTORS) == (500, 200)
    # The defaults' rules on the draw: K = ceil(ln 90) = 5, eigenvectors = C = 3.
    default = {m.name: m for m in methods.standard_methods()}["lp_dmt"]
    assert default.title == "DMT normalized cut (K=ln n, C eig.)"
    np.testing.assert_array_equal(
        default.predict(x, mask, visible, 3),
        dmt_normalized_cut.dmt_normalized_cut(x, mask, visible, 3, k=5, eigenvectors=3))


def test_titles_name_each_method_s_settings():
    titles = [m.title for m in methods.standard_methods(k=7, t=9, rbf_gamma=5.0,
                                                        label_spreading_alpha=0.5, dmt_k=30,
                                                        dmt_eigenvectors=40, dlp_k=4)]
    assert titles == ["LLP (local kNN, K=7, T=9)", "weighted kNN (K=7)",
                      "label spreading (alpha=0.5, gamma=5)", "label propagation (gamma=5)",
                      "DMT normalized cut (K=30, 40 eig.)", "DLP diffusion (k=4)"]
    assert [(m.paper_name, m.paper_accuracy) for m in methods.standard_methods()] == [
        ("LLP", 0.881), (None, None), ("LS", 0.846), ("LP", 0.877), ("LP_DMT", 0.882),
        ("LP_DLP", 0.892)]


@pytest.mark.parametrize("settings, message", [
    (dict(dlp_k=0), "dlp_k must be positive, got 0"),
    (dict(dmt_k=0), "dmt_k must be positive, got 0"),
    (dict(dmt_k=-2), "dmt_k must be positive, got -2"),
    (dict(dmt_eigenvectors=1), "dmt_eigenvectors must be at least 2 .*, got 1"),
    (dict(rbf_gamma=-1.0), "rbf_gamma must be positive, got -1.0"),
    (dict(label_spreading_alpha=1.0), r"label_spreading_alpha must lie in \(0, 1\), got 1.0"),
])
def test_settings_out_of_range_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        methods.standard_methods(**settings)


def test_every_method_labels_separated_clusters_right():
    rng = np.random.default_rng(1)
    x, y = clusters(rng, 4, 30, 16, spread=0.3)
    mask = labelled_first(y, 3)
    for method in methods.standard_methods():
        predictions = method.predict(x, mask, np.where(mask, y, -1), 4)
        assert np.mean(predictions[~mask] == y[~mask]) == 1.0, method.name
