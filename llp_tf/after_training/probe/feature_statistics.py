"""Per-feature statistics of a feature array (or a cache file), streamed in float64 row
chunks and combined with Chan et al.'s parallel update."""

import numpy as np

from llp_tf.tensor_types import Array

#: Floor of a feature's standard deviation (a constant feature stays 0, not NaN).
STANDARDIZE_EPSILON = 1e-6
CHUNK_BYTES = 16 * 2**20


def default_chunk_rows(feature_dim: int) -> int:
    """int: rows per chunk so that a float64 chunk takes about `CHUNK_BYTES`."""
    return max(1, CHUNK_BYTES // (8 * max(int(feature_dim), 1)))


def _chunks(features, chunk_rows, dtype=None):
    """The rows of ``features`` as chunks of new arrays the caller may change in place."""
    chunk_rows = chunk_rows or default_chunk_rows(features.shape[1])
    for start in range(0, features.shape[0], chunk_rows):
        yield np.array(features[start:start + chunk_rows], dtype=dtype, copy=True)


def moments(features: Array, chunk_rows: int | None = None) -> tuple[Array, Array]:
    """(mean float64 [F], population variance float64 [F]) of ``features`` [N, F] (an array
    or `npy_rows.NpyRows`), read once, ``chunk_rows`` rows at a time."""
    count, mean, squares = 0, None, None
    for chunk in _chunks(features, chunk_rows, np.float64):
        chunk_count = chunk.shape[0]
        chunk_mean = chunk.mean(axis=0)
        chunk -= chunk_mean
        chunk_squares = np.einsum("ij,ij->j", chunk, chunk)
        if mean is None:
            count, mean, squares = chunk_count, chunk_mean, chunk_squares
            continue
        total = count + chunk_count
        delta = chunk_mean - mean
        mean = mean + delta * (chunk_count / total)
        squares = squares + chunk_squares + delta ** 2 * (count * chunk_count / total)
        count = total
    if mean is None:
        raise ValueError("moments of an empty feature array")
    return mean, squares / count


def standardizer(train_features: Array, chunk_rows: int | None = None) -> tuple[Array, Array]:
    """(mean, scale) float32 [F] each, to apply as ``(features - mean) / scale``; scale is
    the standard deviation floored at `STANDARDIZE_EPSILON`."""
    mean, variance = moments(train_features, chunk_rows)
    return (mean.astype(np.float32),
            np.maximum(np.sqrt(variance), STANDARDIZE_EPSILON).astype(np.float32))


def all_finite(features: Array, chunk_rows: int | None = None) -> bool:
    """Whether every element of ``features`` (array or `NpyRows`) is finite."""
    chunk_rows = chunk_rows or default_chunk_rows(features.shape[1])
    return all(np.isfinite(features[start:start + chunk_rows]).all()
               for start in range(0, features.shape[0], chunk_rows))
