"""The diffusion of Iscen et al. 2019 ("Label propagation for deep semi-supervised
learning"), a method of the Table 5 comparison (`contract`): a normalised kNN graph
(`dlp_graph`), ``(I - alpha W_n) Z = Y`` solved by conjugate gradient (`dlp_class_scores`),
each unlabelled point's best class (`dlp_diffusion`). The graph's neighbourhood k scales with
the class size (`dlp_k_for`): their release's k = 50 is a tenth of a class of CIFAR-100's 500
training images, and would be a whole class of the Table 5 protocol's 50."""

from typing import Any

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

from llp_tf.after_training.transduction.contract import check_inputs, with_labelled
from llp_tf.tensor_types import Array

# As Iscen et al.'s release (ahmetius/LP-DeepSSL).
DLP_K = 50
#: The release's k = 50 over CIFAR-100's 500 training images a class: k is a tenth of a class.
DLP_CLASS_SIZE_PER_NEIGHBOUR = 10
DLP_GAMMA = 3.0
DLP_ALPHA = 0.99
DLP_MAX_ITER = 20
DLP_TOLERANCE = 1e-6
DLP_SEARCH_CHUNK = 2048


def dlp_k_for(images_per_class: int) -> int:
    """The graph's neighbourhood k for classes of ``images_per_class`` points: a tenth of a class
    (rounded down, at least 1), at most the release's 50 (reached at 500 a class)."""
    return max(1, min(DLP_K, int(images_per_class) // DLP_CLASS_SIZE_PER_NEIGHBOUR))


def dlp_graph(embeddings: Array, k: int = DLP_K, gamma: float = DLP_GAMMA,
              chunk_size: int = DLP_SEARCH_CHUNK) -> scipy.sparse.csr_matrix:
    """csr_matrix float64 [n, n]: ``D^-1/2 (W + W^T) D^-1/2`` of the kNN graph of
    ``embeddings`` float [n, D] (unit rows), weights ``max(v_i . v_j, 0) ** gamma`` (the
    release would raise a negative one to an odd power)."""
    vectors = np.asarray(embeddings, np.float64)
    n = vectors.shape[0]
    k = min(int(k), n - 1)
    if k < 1:
        return scipy.sparse.csr_matrix((n, n))
    rows, columns, weights = [], [], []
    for start in range(0, n, chunk_size):
        similarity = vectors[start:start + chunk_size] @ vectors.T
        chunk_rows = np.arange(start, start + similarity.shape[0])
        similarity[chunk_rows - start, chunk_rows] = -np.inf
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
    """float64 [n, C]: Z of ``(I - alpha W_n) Z = Y`` by conjugate gradient, Y's column j
    ``1 / |L_j|`` on class j's labelled points (their eq. 5); negative scores set to 0 and
    at most 20 steps (``max_iter=None``: to ``tol``), as the release."""
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
    """int64 [n]: the argmax of `dlp_class_scores` (``settings`` passed on)."""
    scores = dlp_class_scores(embeddings, labelled_mask, labels, num_classes, **settings)
    labels = np.asarray(labels, np.int64)
    labelled_mask = np.asarray(labelled_mask, bool)
    return with_labelled(scores[~labelled_mask].argmax(axis=1), labelled_mask, labels)
