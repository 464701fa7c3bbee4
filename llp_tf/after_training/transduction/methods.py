"""The label propagation methods of the paper's Table 5, on one fixed set of embeddings:
``local_knn`` (LLP, eq. 5-8), ``knn`` (eq. 5-6), ``label_spreading``, ``label_propagation``
(scikit-learn, RBF kernel of LLP's similarity scale: `rbf_gamma`) and ``dlp``. Each follows
`contract`."""

import dataclasses
from collections.abc import Callable

import numpy as np

from llp_tf.after_training.transduction import contract
from llp_tf.after_training.transduction.dlp_diffusion import DLP_K, dlp_diffusion
from llp_tf.core import hyperparameters, propagation
from llp_tf.errors import ConfigError
from llp_tf.tensor_types import Array


# scikit-learn's defaults (docs/after-training.md: why not Zhou et al.'s alpha 0.99).
LABEL_SPREADING_ALPHA = 0.2
LABEL_SPREADING_MAX_ITER = 30
LABEL_PROPAGATION_MAX_ITER = 1000
SKLEARN_TOLERANCE = 1e-3

# The paper's Table 5: top-1 (a fraction) of 50 ImageNet classes x 50 images, 5 labelled.
PAPER_TABLE5_ACCURACY = {
    "local_knn": ("LLP", 0.881),
    "label_spreading": ("LS", 0.846),
    "label_propagation": ("LP", 0.877),
    "dlp": ("LP_DLP", 0.892),
}
PAPER_TABLE5_UNMATCHED = {"LP_DMT": 0.882}


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


def rbf_gamma(temperature: float) -> float:
    """``1 / (2 tau)``: the RBF kernel on unit vectors is then ``exp(a.b / tau)`` up to a
    constant."""
    return 1.0 / (2.0 * temperature)


def _sklearn_transduction(model, embeddings, labelled_mask, labels):
    targets = np.where(labelled_mask, labels, -1)
    model.fit(embeddings, targets)
    return contract.with_labelled(model.transduction_[~labelled_mask].astype(np.int64),
                                 labelled_mask, labels)


def label_spreading(embeddings: Array, labelled_mask: Array, labels: Array, num_classes: int,
                    temperature: float = hyperparameters.TEMPERATURE,
                    alpha: float = LABEL_SPREADING_ALPHA,
                    max_iter: int = LABEL_SPREADING_MAX_ITER,
                    tol: float = SKLEARN_TOLERANCE) -> Array:
    """Label spreading (Zhou et al. 2004), scikit-learn's, RBF kernel of `rbf_gamma`;
    warns (ConvergenceWarning) at ``max_iter``. Otherwise as `llp_propagation`."""
    from sklearn.semi_supervised import LabelSpreading  # noqa: PLC0415 -- slow import

    embeddings, labelled_mask, labels = contract.check_inputs(embeddings, labelled_mask, labels,
                                                             num_classes)
    model = LabelSpreading(kernel="rbf", gamma=rbf_gamma(temperature), alpha=alpha,
                           max_iter=max_iter, tol=tol)
    return _sklearn_transduction(model, embeddings, labelled_mask, labels)


def label_propagation(embeddings: Array, labelled_mask: Array, labels: Array, num_classes: int,
                      temperature: float = hyperparameters.TEMPERATURE,
                      max_iter: int = LABEL_PROPAGATION_MAX_ITER,
                      tol: float = SKLEARN_TOLERANCE) -> Array:
    """Label propagation (Zhu & Ghahramani 2002), scikit-learn's, RBF kernel of `rbf_gamma`;
    warns (ConvergenceWarning) at ``max_iter``. Otherwise as `llp_propagation`."""
    from sklearn.semi_supervised import LabelPropagation  # noqa: PLC0415 -- slow import

    embeddings, labelled_mask, labels = contract.check_inputs(embeddings, labelled_mask, labels,
                                                             num_classes)
    model = LabelPropagation(kernel="rbf", gamma=rbf_gamma(temperature), max_iter=max_iter,
                             tol=tol)
    return _sklearn_transduction(model, embeddings, labelled_mask, labels)


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
                     temperature: float = hyperparameters.TEMPERATURE
                     ) -> tuple[PropagationMethod, ...]:
    """The five `PropagationMethod`s with ``k``, ``t`` and ``temperature`` bound;
    ConfigError when one is not positive."""
    for name, value in (("k", k), ("t", t), ("temperature", temperature)):
        if not value > 0:
            raise ConfigError(f"The propagation setting {name} must be positive, got {value}.")
    def method(name, title, predict):
        paper_name, paper_accuracy = PAPER_TABLE5_ACCURACY.get(name, (None, None))
        return PropagationMethod(name, title, predict, paper_name, paper_accuracy)

    return (
        method("local_knn", f"LLP (local kNN, K={k}, T={t})",
               lambda x, m, y, c: llp_propagation(x, m, y, c, k=k, t=t, temperature=temperature)),
        method("knn", f"weighted kNN (K={k})",
               lambda x, m, y, c: weighted_knn(x, m, y, c, k=k, temperature=temperature)),
        method("label_spreading", "label spreading (sklearn)",
               lambda x, m, y, c: label_spreading(x, m, y, c, temperature=temperature)),
        method("label_propagation", "label propagation (sklearn)",
               lambda x, m, y, c: label_propagation(x, m, y, c, temperature=temperature)),
        method("dlp", f"DLP diffusion (k={DLP_K})", dlp_diffusion),
    )
