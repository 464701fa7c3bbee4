"""Label spreading (Zhou et al. 2004) and label propagation (Zhu & Ghahramani 2002), two methods
of the Table 5 comparison (`contract`), on the dense graph of the RBF kernel
``w_ij = exp(-gamma |x_i - x_j|^2)`` (``w_ii = 0``), each solved at its fixed point in float64:

- spreading: ``F = (I - alpha S)^-1 Y`` with ``S = D^-1/2 W D^-1/2`` (Zhou et al.'s closed form);
- propagation: the harmonic solution ``F_u = (I - P_uu)^-1 P_ul Y_l`` with ``P = D^-1 W``.

scikit-learn's `LabelSpreading` and `LabelPropagation` iterate towards the same fixed points
(its 30-step cap stops label spreading far from it at alpha = 0.99). Weights are normalised in
log space, so no row underflows to zero at a large gamma."""

import numpy as np
import scipy.special

from llp_tf.after_training.transduction.contract import check_inputs
from llp_tf.errors import ConfigError
from llp_tf.tensor_types import Array

#: scikit-learn's default RBF gamma of `LabelSpreading` and `LabelPropagation`.
SKLEARN_RBF_GAMMA = 20.0
#: Zhou et al. 2004's alpha, the one their experiments use.
ZHOU_LABEL_SPREADING_ALPHA = 0.99

def log_rbf_affinity(embeddings: Array, gamma: float) -> Array:
    """float64 [n, n]: ``-gamma |x_i - x_j|^2`` of ``embeddings`` float [n, D], -inf on the
    diagonal (no self-loops)."""
    vectors = np.asarray(embeddings, np.float64)
    squared = np.sum(vectors * vectors, axis=1)
    distances = np.maximum(squared[:, None] + squared[None, :] - 2.0 * vectors @ vectors.T, 0.0)
    log_weights = -float(gamma) * distances
    np.fill_diagonal(log_weights, -np.inf)
    return log_weights


def _one_hot(labelled_mask, labels, num_classes):
    targets = np.zeros((len(labels), num_classes))
    targets[np.flatnonzero(labelled_mask), labels[labelled_mask]] = 1.0
    return targets


def _solve(matrix, right_hand_side, method):
    try:
        return np.linalg.solve(matrix, right_hand_side)
    except np.linalg.LinAlgError:
        raise ConfigError(f"The {method} system is singular: at this RBF gamma some points have "
                          "no weight to any other in float64; use a smaller gamma.") from None


def label_spreading_scores(embeddings: Array, labelled_mask: Array, labels: Array,
                           num_classes: int, gamma: float, alpha: float) -> Array:
    """float64 [n, C]: Zhou et al.'s ``(I - alpha S)^-1 Y``, Y one-hot on the labelled points
    (``embeddings`` float [n, D], ``labelled_mask`` bool [n], ``labels`` int [n])."""
    embeddings, labelled_mask, labels = check_inputs(embeddings, labelled_mask, labels,
                                                    num_classes)
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"Label spreading's alpha must lie in (0, 1), got {alpha}.")
    log_weights = log_rbf_affinity(embeddings, gamma)
    log_degree = scipy.special.logsumexp(log_weights, axis=1)
    spread = np.exp(log_weights - 0.5 * log_degree[:, None] - 0.5 * log_degree[None, :])
    system = np.eye(len(labels)) - alpha * spread
    return _solve(system, _one_hot(labelled_mask, labels, num_classes), "label spreading")


def label_propagation_scores(embeddings: Array, labelled_mask: Array, labels: Array,
                             num_classes: int, gamma: float) -> Array:
    """float64 [n, C]: the harmonic solution on the unlabelled rows (each a distribution over
    the classes), the one-hot labels on the labelled rows; arguments as
    `label_spreading_scores`."""
    embeddings, labelled_mask, labels = check_inputs(embeddings, labelled_mask, labels,
                                                    num_classes)
    log_weights = log_rbf_affinity(embeddings, gamma)
    transition = np.exp(log_weights
                        - scipy.special.logsumexp(log_weights, axis=1, keepdims=True))
    unlabelled = ~labelled_mask
    targets = _one_hot(labelled_mask, labels, num_classes)
    system = np.eye(unlabelled.sum()) - transition[np.ix_(unlabelled, unlabelled)]
    scores = targets.copy()
    scores[unlabelled] = _solve(
        system, transition[np.ix_(unlabelled, labelled_mask)] @ targets[labelled_mask],
        "label propagation")
    return scores
