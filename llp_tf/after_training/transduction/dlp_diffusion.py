"""The diffusion of Iscen et al. 2019 ("Label propagation for deep semi-supervised
learning"), one of the methods compared with LLP (`methods`).

A kNN graph of the embeddings with similarities raised to a power, made
symmetric and normalised (`dlp_graph`); then ``(I - alpha W_n) Z = Y`` is
solved by conjugate gradient for the class scores Z (`dlp_class_scores`),
and each unlabelled point takes its highest-scoring class (`dlp_diffusion`).
Arguments and result as every method of the comparison (`contract`).
"""

from typing import Any

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

from llp_tf.after_training.transduction.contract import check_inputs, with_labelled
from llp_tf.tensor_types import Array

# DLP (Iscen et al. 2019 and their release, ahmetius/LP-DeepSSL): 50
# neighbours per point, similarities cubed, alpha = 0.99, conjugate gradient
# stopped after 20 steps or at a relative residual of 1e-6.
DLP_K = 50
DLP_GAMMA = 3.0
DLP_ALPHA = 0.99
DLP_MAX_ITER = 20
DLP_TOLERANCE = 1e-6
# Rows of the similarity matrix held at once by the kNN-graph search.
DLP_SEARCH_CHUNK = 2048


def dlp_graph(embeddings: Array, k: int = DLP_K, gamma: float = DLP_GAMMA,
              chunk_size: int = DLP_SEARCH_CHUNK) -> scipy.sparse.csr_matrix:
    """The symmetric-normalised kNN affinity of Iscen et al. 2019.

    Each point links to its ``k`` most similar other points with weight
    ``max(v_i . v_j, 0) ** gamma`` (negative similarities, which the release
    would raise to an odd power, get no edge), the graph is symmetrised as
    ``W + W^T`` and normalised as ``D^-1/2 W D^-1/2`` (a point without edges
    keeps degree 1).

    Args:
      embeddings: float [n, D], unit rows.
      k: int, neighbours per point; at most n - 1 are used.
      gamma: float, the power.
      chunk_size: int, rows of similarities computed at once (memory
        ``chunk_size x n``).

    Returns:
      scipy.sparse.csr_matrix float64 [n, n].
    """
    vectors = np.asarray(embeddings, np.float64)
    n = vectors.shape[0]
    k = min(int(k), n - 1)
    if k < 1:
        return scipy.sparse.csr_matrix((n, n))
    rows, columns, weights = [], [], []
    for start in range(0, n, chunk_size):
        similarity = vectors[start:start + chunk_size] @ vectors.T
        chunk_rows = np.arange(start, start + similarity.shape[0])
        similarity[chunk_rows - start, chunk_rows] = -np.inf  # no self-edge
        neighbours = np.argpartition(-similarity, k - 1, axis=1)[:, :k]
        rows.append(np.repeat(chunk_rows, k))
        columns.append(neighbours.ravel())
        weights.append(np.take_along_axis(similarity, neighbours, axis=1).ravel())
    weights = np.maximum(np.concatenate(weights), 0.0) ** gamma
    graph = scipy.sparse.csr_matrix((weights, (np.concatenate(rows), np.concatenate(columns))),
                                    shape=(n, n))
    graph = (graph + graph.T).tocsr()
    degree = np.asarray(graph.sum(axis=1)).ravel()
    degree[degree == 0] = 1.0
    scale = scipy.sparse.diags(1.0 / np.sqrt(degree))
    return (scale @ graph @ scale).tocsr()


def dlp_class_scores(embeddings: Array, labelled_mask: Array, labels: Array, num_classes: int,
                     k: int = DLP_K, gamma: float = DLP_GAMMA, alpha: float = DLP_ALPHA,
                     max_iter: int | None = DLP_MAX_ITER, tol: float = DLP_TOLERANCE) -> Array:
    """Scores Z of the DLP diffusion: ``(I - alpha W_n) Z = Y`` by conjugate gradient.

    Column j of Y is ``1 / |L_j|`` on the labelled points of class j (L_j)
    and 0 elsewhere, as in Iscen et al. 2019 (eq. 5 of their paper).
    ``I - alpha W_n`` is symmetric positive definite for alpha < 1, so CG
    applies; the release stops after 20 steps, ``max_iter=None`` runs to
    ``tol``. Tiny negative scores from round-off are set to 0, as in the
    release.

    Args:
      embeddings, labelled_mask, labels, num_classes: see `contract`.
      k, gamma: the graph's, see `dlp_graph`.
      alpha: float in (0, 1).
      max_iter: int or None, CG steps per class.
      tol: float, CG's relative residual.

    Returns:
      float64 [n, num_classes].
    """
    embeddings, labelled_mask, labels = check_inputs(embeddings, labelled_mask, labels,
                                                    num_classes)
    n = embeddings.shape[0]
    system = (scipy.sparse.identity(n, format="csr")
              - alpha * dlp_graph(embeddings, k, gamma)).tocsr()
    scores = np.zeros((n, num_classes))
    for j in range(num_classes):
        members = labelled_mask & (labels == j)
        if not members.any():
            continue
        target = members / members.sum()
        scores[:, j], _ = scipy.sparse.linalg.cg(system, target, rtol=tol, atol=0.0,
                                                 maxiter=max_iter)
    return np.maximum(scores, 0.0)


def dlp_diffusion(embeddings: Array, labelled_mask: Array, labels: Array, num_classes: int,
                  **settings: Any) -> Array:
    """Predictions of the DLP diffusion: the argmax of `dlp_class_scores`
    (settings passed on to it). Result as every method (`contract`): int64 [n]."""
    scores = dlp_class_scores(embeddings, labelled_mask, labels, num_classes, **settings)
    labels = np.asarray(labels, np.int64)
    labelled_mask = np.asarray(labelled_mask, bool)
    return with_labelled(scores[~labelled_mask].argmax(axis=1), labelled_mask, labels)
