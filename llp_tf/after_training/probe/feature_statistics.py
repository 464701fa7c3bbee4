"""Per-feature statistics of a feature array, streamed in row chunks.

The probe's training features may be a 20 GB cache file, so nothing here
holds more than one chunk of rows: `standardizer` combines the chunks'
means and sums of squared deviations with Chan et al.'s parallel update
(exact in exact arithmetic, stable in floating point: no E[x^2] - E[x]^2
cancellation). A chunk's statistics and the running ones are float64 (a
chunk of ``chunk_rows`` x F and three [F] vectors); the standardised
features themselves are only ever formed in float32, batch by batch, by the
readout.
"""

import numpy as np

from llp_tf.tensor_types import Array

#: Floor of a feature's standard deviation when standardising (a constant
#: feature, e.g. a dead ReLU channel, is then left at 0 instead of NaN).
STANDARDIZE_EPSILON = 1e-6
#: Bytes of float64 values per chunk (the chunk's rows are ``CHUNK_BYTES // (8 F)``);
#: a pass holds about two chunks.
CHUNK_BYTES = 16 * 2**20


def default_chunk_rows(feature_dim: int) -> int:
    """int: rows per chunk so that a float64 chunk takes about `CHUNK_BYTES`."""
    return max(1, CHUNK_BYTES // (8 * max(int(feature_dim), 1)))


def _chunks(features, chunk_rows, dtype=None):
    """The rows of ``features`` ([N, F]: an array or `NpyRows`) as chunks of new
    arrays (of ``dtype`` if given), which the caller may change in place."""
    chunk_rows = chunk_rows or default_chunk_rows(features.shape[1])
    for start in range(0, features.shape[0], chunk_rows):
        yield np.array(features[start:start + chunk_rows], dtype=dtype, copy=True)


def moments(features: Array, chunk_rows: int | None = None) -> tuple[Array, Array]:
    """Per-feature mean and (population) variance, streamed by row chunks.

    Args:
      features: [N, F] with N >= 1: an array or rows read on demand
        (`npy_rows.NpyRows`); read once, ``chunk_rows`` rows at a time.
      chunk_rows: int, rows per chunk (default `default_chunk_rows`).

    Returns:
      (mean float64 [F], variance float64 [F]).
    """
    count, mean, squares = 0, None, None
    for chunk in _chunks(features, chunk_rows, np.float64):
        chunk_count = chunk.shape[0]
        chunk_mean = chunk.mean(axis=0)
        chunk -= chunk_mean  # in place: one float64 chunk at a time
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
    """Per-feature (mean, scale) of the training features, float32 [F] each.

    Apply as ``(features - mean) / scale``; ``scale`` is the standard
    deviation floored at `STANDARDIZE_EPSILON`. Streamed (see `moments`).
    """
    mean, variance = moments(train_features, chunk_rows)
    return (mean.astype(np.float32),
            np.maximum(np.sqrt(variance), STANDARDIZE_EPSILON).astype(np.float32))


def all_finite(features: Array, chunk_rows: int | None = None) -> bool:
    """Whether every element of ``features`` ([N, F], array or `NpyRows`) is
    finite; streamed by row chunks."""
    chunk_rows = chunk_rows or default_chunk_rows(features.shape[1])
    return all(np.isfinite(features[start:start + chunk_rows]).all()
               for start in range(0, features.shape[0], chunk_rows))
