import numpy as np
import pytest

from llp_tf.after_training.probe import feature_statistics
from llp_tf.after_training.probe.npy_rows import NpyRowWriter, NpyRows


def _features(rng, rows=103, dim=6):
    """float32 [rows, dim]: ReLU-like features with a large mean and a small spread
    in some columns (where E[x^2] - E[x]^2 in float32 would lose every digit)."""
    scale = np.array([1.0, 0.01, 5.0, 1e-3, 2.0, 0.5])[:dim]
    offset = np.array([0.0, 1000.0, 3.0, 200.0, -1.0, 0.0])[:dim]
    return (offset + scale * rng.normal(size=(rows, dim))).astype(np.float32)


@pytest.mark.parametrize("chunk_rows", [1, 7, 50, 103, 1000])
def test_streamed_moments_equal_float64_numpy_on_the_whole_array(chunk_rows):
    features = _features(np.random.default_rng(0))
    mean, variance = feature_statistics.moments(features, chunk_rows)
    reference = features.astype(np.float64)
    kept = features.copy()
    np.testing.assert_allclose(mean, reference.mean(axis=0), rtol=1e-12, atol=0)
    np.testing.assert_array_equal(features, kept)  # the input is not changed
    mean64, _ = feature_statistics.moments(reference, chunk_rows)
    np.testing.assert_array_equal(reference, features.astype(np.float64))
    np.testing.assert_allclose(mean64, mean, rtol=1e-15)
    np.testing.assert_allclose(variance, reference.var(axis=0), rtol=1e-9, atol=0)


def test_standardizer_reads_a_cache_file_chunk_by_chunk(tmp_path):
    features = _features(np.random.default_rng(1))
    features[:, 5] = 0.25  # a constant feature: its scale is the floor
    writer = NpyRowWriter(str(tmp_path / "f.npy"), *features.shape)
    writer.write(np.arange(len(features)), features)
    writer.close()
    mean, scale = feature_statistics.standardizer(NpyRows(str(tmp_path / "f.npy")),
                                                  chunk_rows=10)
    reference = features.astype(np.float64)
    assert mean.dtype == np.float32 and scale.dtype == np.float32
    np.testing.assert_allclose(mean, reference.mean(axis=0), rtol=1e-7)
    np.testing.assert_allclose(scale[:5], reference.std(axis=0)[:5], rtol=1e-6)
    assert scale[5] == np.float32(feature_statistics.STANDARDIZE_EPSILON)


def test_all_finite_looks_at_every_chunk():
    features = _features(np.random.default_rng(2))
    assert feature_statistics.all_finite(features, chunk_rows=10)
    features[102, 3] = np.nan  # in the last, short chunk
    assert not feature_statistics.all_finite(features, chunk_rows=10)
    features[102, 3] = np.inf
    assert not feature_statistics.all_finite(features, chunk_rows=10)


def test_chunk_rows_keep_a_float64_chunk_near_16_mib():
    assert feature_statistics.default_chunk_rows(2048) == 1024
    assert feature_statistics.default_chunk_rows(10**9) == 1
