"""The global propagation of DMT (Liu, Wu, Hu, Lin 2018, "Deep metric transfer for label
propagation with limited annotated data", arXiv:1812.08781), the LP_DMT row of the paper's
Table 5 and a method of its comparison (`contract`): a constrained normalized cut, as their
release computes it for ImageNet (microsoft/metric-transfer.pytorch,
``notebooks/nc_imagenet.ipynb``):

- `dmt_graph`: each point's K nearest points by ``d = (1 - cos) / 2``, weighted
  ``exp(-d / d_K)`` with ``d_K`` the point's K-th distance, symmetrised ``(A + A^T) / 2``;
- `dmt_class_scores`: the normalised Laplacian ``L = I - D^-1/2 W D^-1/2``, its smallest
  eigenpairs but the first, a prior +1 / -1 on each class's labelled / other labelled points,
  balanced by degree and made unit per class, then ``V diag(1 / lambda) V^T prior``;
- `dmt_normalized_cut`: each unlabelled point's best class.

The release's K = 500 and 200 eigenvectors are sized for its graphs of 151,517 points of
1,000 classes; on a draw of 500 points they link every point to every other and keep 40% of
the spectrum. The default sizes follow the rules of spectral clustering instead (von Luxburg
2007, "A tutorial on spectral clustering", sections 8.1 and 4): K = ceil(ln n) for n points
(`default_k`), and the C smallest eigenvectors for C classes (`default_eigenvectors`).

Three departures, all numerical: the release leaves a point's own row in its search with
cosine 0 (distance 0.5, so it is left out only when K closer points exist); here it is
always left out. The release asks ARPACK for the eigenpairs at tolerance 1e-2; here they are
exact (LAPACK, float64). The release drops the first eigenvector computed; here the one it
is on a connected graph, sqrt(degree), is dropped by name, so that a graph of several
components (several zero eigenvalues, in any basis) keeps the others."""

import math
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse

from llp_tf.after_training.transduction.contract import check_inputs, with_labelled
from llp_tf.tensor_types import Array

# The release's ImageNet notebook, for 151,517 points of 1,000 classes (not the defaults).
RELEASE_K = 500
RELEASE_EIGENVECTORS = 200
DMT_SEARCH_CHUNK = 2048
#: Eigenvalues below this count as this: a graph of several components has several zero
#: eigenvalues, which rounding may make slightly negative.
EIGENVALUE_FLOOR = 1e-12
#: Added to the first eigenvector's eigenvalue 0, above the normalised Laplacian's spectrum.
TRIVIAL_SHIFT = 3.0


def default_k(n: int) -> int:
    """K for a graph of ``n`` points: ceil(ln n), at least 1 (von Luxburg 2007, 8.1)."""
    return max(1, math.ceil(math.log(max(n, 1))))


def default_eigenvectors(num_classes: int) -> int:
    """Eigenvectors for ``num_classes`` classes: as many, at least 2, the first of them the
    constant one the release drops (von Luxburg 2007, 4)."""
    return max(2, int(num_classes))


def dmt_graph(embeddings: Array, k: int,
              chunk_size: int = DMT_SEARCH_CHUNK) -> scipy.sparse.csr_matrix:
    """csr_matrix float64 [n, n]: ``(A + A^T) / 2`` of the kNN graph of ``embeddings``
    float [n, D] (unit rows), ``A_ij = exp(-d_ij / d_iK)``, ``d = (1 - v_i . v_j) / 2``, for
    the ``min(k, n - 1)`` nearest j != i (``d_iK = 0``: weight 1)."""
    vectors = np.asarray(embeddings, np.float64)
    n = vectors.shape[0]
    k = min(int(k), n - 1)
    if k < 1:
        return scipy.sparse.csr_matrix((n, n))
    rows, columns, weights = [], [], []
    for start in range(0, n, chunk_size):
        distance = (1.0 - vectors[start:start + chunk_size] @ vectors.T) / 2.0
        chunk_rows = np.arange(start, start + distance.shape[0])
        distance[chunk_rows - start, chunk_rows] = np.inf
        neighbours = np.argpartition(distance, k - 1, axis=1)[:, :k]
        nearest = np.take_along_axis(distance, neighbours, axis=1)
        scale = nearest.max(axis=1, keepdims=True)
        scaled = np.divide(nearest, scale, out=np.zeros_like(nearest), where=scale > 0)
        rows.append(np.repeat(chunk_rows, k))
        columns.append(neighbours.ravel())
        weights.append(np.exp(-scaled).ravel())
    graph = scipy.sparse.csr_matrix(
        (np.concatenate(weights), (np.concatenate(rows), np.concatenate(columns))),
        shape=(n, n))
    return ((graph + graph.T) / 2.0).tocsr()


def _unit_columns(matrix):
    norms = np.linalg.norm(matrix, axis=0, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def balanced_prior(degree: Array, labelled_mask: Array, labels: Array,
                   num_classes: int) -> Array:
    """float64 [n, C]: the release's prior: +1 on class j's labelled points, -1 on the other
    labelled points, 0 elsewhere; the positive and negative parts rescaled by the square
    root of ``degree`` float [n] so that each weighs the same in column j, then column j made
    unit (a class without labelled points: a zero column)."""
    signs = np.zeros((len(labels), num_classes))
    signs[labelled_mask] = -1.0
    signs[np.flatnonzero(labelled_mask), labels[labelled_mask]] = 1.0
    positive = degree[:, None] * (signs > 0)
    negative = degree[:, None] * (signs < 0)
    positive_mass, negative_mass = positive.sum(axis=0), negative.sum(axis=0)
    usable = (positive_mass > 0) & (negative_mass > 0)
    ratio = np.where(usable, positive_mass, 1.0) / np.where(usable, negative_mass, 1.0)
    prior = np.sqrt(positive / ratio) - np.sqrt(negative * ratio)
    return _unit_columns(np.where(usable, prior, 0.0))


def dmt_class_scores(embeddings: Array, labelled_mask: Array, labels: Array, num_classes: int,
                     k: int | None = None, eigenvectors: int | None = None) -> Array:
    """float64 [n, C]: ``V diag(1 / lambda) V^T prior`` over the smallest
    ``min(eigenvectors, n)`` eigenpairs of the normalised Laplacian of `dmt_graph` but the
    first, sqrt(degree) (eigenvalues at least `EIGENVALUE_FLOOR`), `balanced_prior`'s
    columns; each column then made unit (times sqrt(n), as the release, which no argmax
    sees). ``k`` and ``eigenvectors`` default to `default_k` (n) and `default_eigenvectors`
    (C)."""
    embeddings, labelled_mask, labels = check_inputs(embeddings, labelled_mask, labels,
                                                    num_classes)
    n = embeddings.shape[0]
    k = default_k(n) if k is None else k
    eigenvectors = default_eigenvectors(num_classes) if eigenvectors is None else eigenvectors
    graph = dmt_graph(embeddings, k)
    degree = np.asarray(graph.sum(axis=1)).ravel()
    scale = np.divide(1.0, np.sqrt(degree), out=np.zeros_like(degree), where=degree > 0)
    laplacian = np.eye(n) - (scipy.sparse.diags(scale) @ graph @ scipy.sparse.diags(scale)
                             ).toarray()
    # The first eigenvector, sqrt(degree) made unit (eigenvalue 0), moved above the spectrum
    # (which lies in [0, 2]): the smallest eigenpairs of the rest, even where the graph has
    # several components and so several zero eigenvalues in an arbitrary basis.
    trivial = np.sqrt(degree) / np.linalg.norm(np.sqrt(degree))
    laplacian += TRIVIAL_SHIFT * np.outer(trivial, trivial)
    count = min(int(eigenvectors), n) - 1
    values, vectors = scipy.linalg.eigh(laplacian, subset_by_index=[0, count - 1])
    values = np.maximum(values, EIGENVALUE_FLOOR)
    prior = balanced_prior(degree, labelled_mask, labels, num_classes)
    scores = (vectors / values) @ (vectors.T @ prior)
    return _unit_columns(scores) * np.sqrt(n)


def dmt_normalized_cut(embeddings: Array, labelled_mask: Array, labels: Array,
                       num_classes: int, **settings: Any) -> Array:
    """int64 [n]: the argmax of `dmt_class_scores` (``settings`` passed on), labelled points
    keeping their label."""
    scores = dmt_class_scores(embeddings, labelled_mask, labels, num_classes, **settings)
    labels = np.asarray(labels, np.int64)
    labelled_mask = np.asarray(labelled_mask, bool)
    return with_labelled(scores[~labelled_mask].argmax(axis=1), labelled_mask, labels)
