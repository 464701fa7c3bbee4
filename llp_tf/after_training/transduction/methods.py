"""The label propagation methods of the paper's Table 5, on one fixed set of embeddings:
``local_knn`` (LLP, eq. 5-8), ``knn`` (eq. 5-6, not in Table 5), ``label_spreading``,
``label_propagation`` (`rbf_graph_propagation`, scikit-learn's RBF kernel), ``lp_dmt``
(`dmt_normalized_cut`) and ``dlp`` (`dlp_diffusion`). Each follows `contract`;
`method_settings` says where each default comes from."""

import dataclasses
from collections.abc import Callable

import numpy as np

from llp_tf.after_training.transduction import contract, rbf_graph_propagation
from llp_tf.after_training.transduction.dlp_diffusion import DLP_K, dlp_diffusion
from llp_tf.after_training.transduction.dmt_normalized_cut import dmt_normalized_cut
from llp_tf.after_training.transduction.rbf_graph_propagation import (
    SKLEARN_RBF_GAMMA, ZHOU_LABEL_SPREADING_ALPHA)
from llp_tf.core import hyperparameters, propagation
from llp_tf.errors import ConfigError
from llp_tf.tensor_types import Array


# The paper's Table 5: top-1 (a fraction) of 50 ImageNet classes x 50 images, 5 labelled.
PAPER_TABLE5_ACCURACY = {
    "local_knn": ("LLP", 0.881),
    "label_spreading": ("LS", 0.846),
    "label_propagation": ("LP", 0.877),
    "lp_dmt": ("LP_DMT", 0.882),
    "dlp": ("LP_DLP", 0.892),
}


def llp_propagation(embeddings: Array, labelled_mask: Array, labels: Array, num_classes: int,
                    k: int = hyperparameters.K, t: int = hyperparameters.T,
                    temperature: float = hyperparameters.TEMPERATURE) -> Array:
    """int64 [n]: LLP's locally weighted kNN (eq. 5-8) of ``embeddings`` float [n, D]
    (unit rows), the whole set as the bank; ``labelled_mask`` bool [n], ``labels`` int [n]."""
    embeddings, labelled_mask, labels = contract.check_inputs(embeddings, labelled_mask, labels,
                                                             num_classes)
    vectors = embeddings.astype(np.float32)
    labelled = vectors[labelled_mask]
    density = propagation.local_density(labelled, vectors, t, temperature)
    classes, _ = propagation.propagate(vectors[~labelled_mask], labelled, labels[labelled_mask],
                                       num_classes, k, temperature, density)
    return contract.with_labelled(classes.numpy(), labelled_mask, labels)


def weighted_knn(embeddings: Array, labelled_mask: Array, labels: Array, num_classes: int,
                 k: int = hyperparameters.K,
                 temperature: float = hyperparameters.TEMPERATURE) -> Array:
    """The weighted kNN of eq. 5-6; arguments and result as `llp_propagation`."""
    embeddings, labelled_mask, labels = contract.check_inputs(embeddings, labelled_mask, labels,
                                                             num_classes)
    vectors = embeddings.astype(np.float32)
    classes, _ = propagation.propagate(vectors[~labelled_mask], vectors[labelled_mask],
                                       labels[labelled_mask], num_classes, k, temperature)
    return contract.with_labelled(classes.numpy(), labelled_mask, labels)


def _argmax_transduction(scores, labelled_mask, labels):
    labelled_mask = np.asarray(labelled_mask, bool)
    labels = np.asarray(labels, np.int64)
    return contract.with_labelled(scores[~labelled_mask].argmax(axis=1), labelled_mask, labels)


def label_spreading(embeddings: Array, labelled_mask: Array, labels: Array, num_classes: int,
                    gamma: float = SKLEARN_RBF_GAMMA,
                    alpha: float = ZHOU_LABEL_SPREADING_ALPHA) -> Array:
    """Label spreading (Zhou et al. 2004) at its fixed point, RBF kernel
    ``exp(-gamma |a - b|^2)``; arguments and result as `llp_propagation`."""
    scores = rbf_graph_propagation.label_spreading_scores(embeddings, labelled_mask, labels,
                                                          num_classes, gamma, alpha)
    return _argmax_transduction(scores, labelled_mask, labels)


def label_propagation(embeddings: Array, labelled_mask: Array, labels: Array, num_classes: int,
                      gamma: float = SKLEARN_RBF_GAMMA) -> Array:
    """Label propagation (Zhu & Ghahramani 2002), the harmonic solution, RBF kernel
    ``exp(-gamma |a - b|^2)``; arguments and result as `llp_propagation`."""
    scores = rbf_graph_propagation.label_propagation_scores(embeddings, labelled_mask, labels,
                                                            num_classes, gamma)
    return _argmax_transduction(scores, labelled_mask, labels)


@dataclasses.dataclass(frozen=True)
class PropagationMethod:
    """One method of the comparison: its results key, title, ``predict`` (as
    `llp_propagation`, settings bound) and its Table 5 row's name and top-1, if any."""

    name: str
    title: str
    predict: Callable[[Array, Array, Array, int], Array]
    paper_name: str | None = None
    paper_accuracy: float | None = None


def standard_methods(k: int = hyperparameters.K, t: int = hyperparameters.T,
                     temperature: float = hyperparameters.TEMPERATURE,
                     rbf_gamma: float = SKLEARN_RBF_GAMMA,
                     label_spreading_alpha: float = ZHOU_LABEL_SPREADING_ALPHA,
                     dmt_k: int | None = None, dmt_eigenvectors: int | None = None,
                     dlp_k: int = DLP_K) -> tuple[PropagationMethod, ...]:
    """The six `PropagationMethod`s with their settings bound (``k``, ``temperature``: LLP's
    and the kNN's; ``t``: LLP's; ``rbf_gamma``: label spreading's and propagation's;
    ``dmt_k``, ``dmt_eigenvectors``: LP_DMT's graph neighbourhood and eigenvectors, None for
    the rules of `dmt_normalized_cut` on each draw;
    ``dlp_k``: DLP's graph neighbourhood); ConfigError when one is out of range."""
    for name, value in (("k", k), ("t", t), ("temperature", temperature),
                        ("rbf_gamma", rbf_gamma), ("dmt_k", 1 if dmt_k is None else dmt_k), ("dlp_k", dlp_k)):
        if not value > 0:
            raise ConfigError(f"The propagation setting {name} must be positive, got {value}.")
    if dmt_eigenvectors is not None and dmt_eigenvectors < 2:
        raise ConfigError(f"The propagation setting dmt_eigenvectors must be at least 2 (the "
                          f"first, constant one is dropped), got {dmt_eigenvectors}.")
    if not 0.0 < label_spreading_alpha < 1.0:
        raise ConfigError(f"The propagation setting label_spreading_alpha must lie in (0, 1), "
                          f"got {label_spreading_alpha}.")

    def method(name, title, predict):
        paper_name, paper_accuracy = PAPER_TABLE5_ACCURACY.get(name, (None, None))
        return PropagationMethod(name, title, predict, paper_name, paper_accuracy)

    return (
        method("local_knn", f"LLP (local kNN, K={k}, T={t})",
               lambda x, m, y, c: llp_propagation(x, m, y, c, k=k, t=t, temperature=temperature)),
        method("knn", f"weighted kNN (K={k})",
               lambda x, m, y, c: weighted_knn(x, m, y, c, k=k, temperature=temperature)),
        method("label_spreading", f"label spreading (alpha={label_spreading_alpha:g}, "
               f"gamma={rbf_gamma:g})",
               lambda x, m, y, c: label_spreading(x, m, y, c, gamma=rbf_gamma,
                                                  alpha=label_spreading_alpha)),
        method("label_propagation", f"label propagation (gamma={rbf_gamma:g})",
               lambda x, m, y, c: label_propagation(x, m, y, c, gamma=rbf_gamma)),
        method("lp_dmt", "DMT normalized cut (K={}, {} eig.)".format(
                   "ln n" if dmt_k is None else dmt_k,
                   "C" if dmt_eigenvectors is None else dmt_eigenvectors),
               lambda x, m, y, c: dmt_normalized_cut(x, m, y, c, k=dmt_k,
                                                     eigenvectors=dmt_eigenvectors)),
        method("dlp", f"DLP diffusion (k={dlp_k})",
               lambda x, m, y, c: dlp_diffusion(x, m, y, c, k=dlp_k)),
    )
