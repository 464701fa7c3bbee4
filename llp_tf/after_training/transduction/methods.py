"""The label propagation methods compared with LLP on one fixed set of embeddings
(the paper's Table 5; `protocol` draws the subsets and scores them).

- ``local_knn``: LLP's locally weighted kNN (eq. 5-8), the local densities taken
  over the given set as the "bank" (`llp_tf.core.propagation`);
- ``knn``: the plain weighted kNN of eq. 5-6 (no local weighting);
- ``label_spreading``: Zhou et al. 2004, scikit-learn's `LabelSpreading`;
- ``label_propagation``: Zhu & Ghahramani 2002, scikit-learn's
  `LabelPropagation`;
- ``dlp``: the diffusion of Iscen et al. 2019 (`dlp_diffusion`).

Every method follows `contract`. Both scikit-learn methods use the RBF
kernel with ``gamma = 1 / (2 tau)``: on unit vectors ``||a - b||^2 = 2 - 2
a.b``, so the kernel is ``exp(-1 / tau) exp(a.b / tau)``, LLP's own
similarity up to a constant that both methods' normalisations cancel; the
five methods see one similarity scale and differ only in how they propagate.
"""

import dataclasses
from collections.abc import Callable

import numpy as np

from llp_tf.after_training.transduction import contract
from llp_tf.after_training.transduction.dlp_diffusion import DLP_K, dlp_diffusion
from llp_tf.core import hyperparameters, propagation
from llp_tf.errors import ConfigError
from llp_tf.tensor_types import Array


# Label spreading: scikit-learn's defaults, alpha = 0.2 and 30 steps (0.2^30
# is far below the tolerance). Zhou et al. 2004's alpha = 0.99 was tried and
# rejected: on a dense RBF graph whose classes overlap, the iteration's
# leading eigenvector then takes over and nearly every point gets one class
# (37% instead of 76% on 20 overlapping Gaussian classes in 128-D, 5 labelled
# of 50 per class; 33% on 3 classes in 8-D), and it needed over 2,000 steps.
LABEL_SPREADING_ALPHA = 0.2
LABEL_SPREADING_MAX_ITER = 30
# Label propagation: scikit-learn's default cap of 1000 steps. Clustered
# embeddings converge well before it (~630 steps for 50 classes x 50 points
# in 128-D, ~200 on the mnist5k demo run); on strongly overlapping classes
# the iteration mixes slowly and stops at the cap, short of the harmonic
# solution (scikit-learn then warns; the predictions are the truncated
# iteration's).
LABEL_PROPAGATION_MAX_ITER = 1000
# scikit-learn's default: the sum over all points and classes of the change
# of the label distributions in one step.
SKLEARN_TOLERANCE = 1e-3

# The paper's Table 5 (Zhuang et al. 2019): top-1 on the unlabelled images
# of 50 ImageNet classes x 50 images, 5 labelled per class, ResNet-50
# features, mean of 10 draws; as fractions, as every accuracy here (the
# paper prints percent: 88.1). LP_DMT (0.882, Liu et al. 2019's metric
# transfer) has no counterpart here.
PAPER_TABLE5_ACCURACY = {
    "local_knn": ("LLP", 0.881),
    "label_spreading": ("LS", 0.846),
    "label_propagation": ("LP", 0.877),
    "dlp": ("LP_DLP", 0.892),
}
PAPER_TABLE5_UNMATCHED = {"LP_DMT": 0.882}


# -- the methods ---------------------------------------------------------------

def llp_propagation(embeddings: Array, labelled_mask: Array, labels: Array, num_classes: int,
                    k: int = hyperparameters.K, t: int = hyperparameters.T,
                    temperature: float = hyperparameters.TEMPERATURE) -> Array:
    """LLP's locally weighted kNN (eq. 5-8) within one set of embeddings.

    The density rho of each labelled point is the sum of ``exp(v_j . v_i /
    tau)`` over its ``t`` nearest points of the whole set (labelled and
    unlabelled, itself included), the set playing the memory bank's part;
    each unlabelled point then takes the vote of the ``k`` labelled points
    with the largest ``exp(v_i . v / tau) / rho_i``.

    Args:
      embeddings: float [n, D], unit rows.
      labelled_mask: bool [n].
      labels: int [n], classes in [0, num_classes) where labelled.
      num_classes: int.
      k, t: int; more than available uses all.
      temperature: float, tau.

    Returns:
      int64 [n].
    """
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
    """The weighted kNN of eq. 5-6: the ``k`` labelled points most similar to
    an unlabelled point vote with weights ``exp(v_i . v / tau)``. Arguments
    and result as `llp_propagation`."""
    embeddings, labelled_mask, labels = contract.check_inputs(embeddings, labelled_mask, labels,
                                                             num_classes)
    vectors = embeddings.astype(np.float32)
    classes, _ = propagation.propagate(vectors[~labelled_mask], vectors[labelled_mask],
                                       labels[labelled_mask], num_classes, k, temperature)
    return contract.with_labelled(classes.numpy(), labelled_mask, labels)


def rbf_gamma(temperature: float) -> float:
    """The RBF ``gamma`` whose kernel on unit vectors is ``exp(a.b / tau)`` up to
    a constant factor: ``1 / (2 tau)``."""
    return 1.0 / (2.0 * temperature)


def _sklearn_transduction(model, embeddings, labelled_mask, labels):
    targets = np.where(labelled_mask, labels, -1)  # scikit-learn marks unlabelled by -1
    model.fit(embeddings, targets)
    return contract.with_labelled(model.transduction_[~labelled_mask].astype(np.int64),
                                 labelled_mask, labels)


def label_spreading(embeddings: Array, labelled_mask: Array, labels: Array, num_classes: int,
                    temperature: float = hyperparameters.TEMPERATURE,
                    alpha: float = LABEL_SPREADING_ALPHA,
                    max_iter: int = LABEL_SPREADING_MAX_ITER,
                    tol: float = SKLEARN_TOLERANCE) -> Array:
    """Label spreading (Zhou et al. 2004) with scikit-learn, RBF kernel with
    ``gamma = 1 / (2 temperature)`` (see the module docstring) and
    scikit-learn's alpha (see `LABEL_SPREADING_ALPHA`).

    It iterates ``F <- alpha S F + (1 - alpha) Y`` with ``S = D^-1/2 W D^-1/2``
    (W the kernel without its diagonal). A ConvergenceWarning is issued when
    ``max_iter`` steps do not reach ``tol``. Other arguments and the result
    as `llp_propagation`.
    """
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
    """Label propagation (Zhu & Ghahramani 2002) with scikit-learn, RBF kernel
    with ``gamma = 1 / (2 temperature)``.

    It iterates ``F <- D^-1 W F`` and resets the labelled rows to their labels
    after every step, converging to the harmonic solution. A
    ConvergenceWarning is issued when ``max_iter`` steps do not reach ``tol``
    (see `LABEL_PROPAGATION_MAX_ITER`).
    Other arguments and the result as `llp_propagation`.
    """
    from sklearn.semi_supervised import LabelPropagation  # noqa: PLC0415 -- slow import

    embeddings, labelled_mask, labels = contract.check_inputs(embeddings, labelled_mask, labels,
                                                             num_classes)
    model = LabelPropagation(kernel="rbf", gamma=rbf_gamma(temperature), max_iter=max_iter,
                             tol=tol)
    return _sklearn_transduction(model, embeddings, labelled_mask, labels)


# -- the set of methods of the comparison --------------------------------------

@dataclasses.dataclass(frozen=True)
class PropagationMethod:
    """One method of the comparison.

    Attributes:
      name: str, key in results and files (e.g. "local_knn").
      title: str, a readable name for tables.
      predict: callable(embeddings [n, D], labelled_mask [n], labels [n],
        num_classes) -> int64 [n], with the settings bound.
      paper_name: str or None, the matching row of the paper's Table 5.
      paper_accuracy: float or None, that row's top-1 (a fraction).
    """

    name: str
    title: str
    predict: Callable[[Array, Array, Array, int], Array]
    paper_name: str | None = None
    paper_accuracy: float | None = None


def standard_methods(k: int = hyperparameters.K, t: int = hyperparameters.T,
                     temperature: float = hyperparameters.TEMPERATURE
                     ) -> tuple[PropagationMethod, ...]:
    """The five methods of the comparison with their settings bound.

    Args:
      k: int, voters of LLP and the weighted kNN.
      t: int, neighbours of LLP's density.
      temperature: float, tau of LLP and the kNN, and the RBF scale of label
        spreading and label propagation (`rbf_gamma`).

    Returns:
      tuple of `PropagationMethod`: local_knn, knn, label_spreading,
      label_propagation, dlp.

    Raises:
      ConfigError: a setting that is not positive.
    """
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
