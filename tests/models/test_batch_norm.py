"""Batch norm: replica-averaged moving statistics, and deferred updates."""

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.models import batch_norm
from tests.models.helpers import tiny_model


@pytest.fixture(scope="module")
def built():
    """Two built tiny models and the first's initial weights, made once per module."""
    first, second = tiny_model().create_weights(16), tiny_model().create_weights(16)
    return first, second, first.get_weights()


@pytest.fixture
def models(built):
    """Two tiny models at the same initial weights (moving statistics 0 and 1)."""
    first, second, initial = built
    for model in (first, second):
        model.set_weights(initial)
    return first, second


def test_deferred_updates_equal_inline_ones_and_the_moving_average_of_the_moments(images,
                                                                                  models):
    inline, deferred = models
    layers = deferred.batch_norm_layers()
    want = inline(images, training=True)
    with batch_norm.DeferredMovingStatistics(layers) as recorder:
        got = deferred(images, training=True)
        moments = recorder.moments()
    np.testing.assert_allclose(got["embedding"], want["embedding"], atol=1e-6)
    # Nothing moved yet: the moving statistics still hold their initial 0 and 1.
    assert all(np.all(layer.moving_mean.numpy() == 0) for layer in layers)
    batch_norm.update_moving_statistics(layers, moments)
    for mine, theirs in zip(layers, inline.batch_norm_layers()):
        np.testing.assert_allclose(mine.moving_mean, theirs.moving_mean, atol=1e-7)
        np.testing.assert_allclose(mine.moving_variance, theirs.moving_variance, atol=1e-6)
    # The first batch norm sees the stem's output: 0.997 * 0 + 0.003 * batch mean (float64).
    stem = deferred.trunk.stem_conv(images).numpy().astype(np.float64)
    np.testing.assert_allclose(layers[0].moving_mean, 0.003 * stem.mean(axis=(0, 1, 2)),
                               rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(layers[0].moving_variance,
                               0.997 + 0.003 * stem.var(axis=(0, 1, 2)), rtol=1e-5)


def test_deferred_moments_come_out_of_a_compiled_function(images, models):
    model, _ = models
    layers = model.batch_norm_layers()

    @tf.function(jit_compile=True)
    def forward(batch):
        with batch_norm.DeferredMovingStatistics(layers) as recorder:
            model(batch, training=True)
        return recorder.moments()

    moments = forward(images)
    assert len(moments) == len(layers) > 1
    stem = model.trunk.stem_conv(images).numpy().astype(np.float64)
    np.testing.assert_allclose(moments[0][0], stem.mean(axis=(0, 1, 2)), rtol=1e-4, atol=1e-6)


def test_inference_and_missing_layers_inside_the_deferral(images, models):
    model, _ = models
    with batch_norm.DeferredMovingStatistics(model.batch_norm_layers()) as recorder:
        model(images, training=False)  # inference records nothing
        with pytest.raises(RuntimeError, match="did not run in training mode"):
            recorder.moments()
    # Outside the block, training calls update the moving statistics as usual.
    model(images, training=True)
    assert not np.all(model.batch_norm_layers()[0].moving_mean.numpy() == 0)


def test_kept_calls_normalise_with_the_batch_and_record_nothing(images, models):
    """Inside `moving_statistics_kept`, a training call gives Keras's
    training-mode output but no update, inline or deferred: a deferral around
    a kept pass and a plain one records the plain pass's moments only."""
    keras_model, kept = models
    layers = kept.batch_norm_layers()
    other_images = images[::-1] * 2.0 + 1.0
    want = keras_model(other_images, training=True)
    with batch_norm.moving_statistics_kept():
        with batch_norm.moving_statistics_kept():
            pass  # leaving an inner block keeps the outer one
        got = kept(other_images, training=True)
    np.testing.assert_allclose(got["embedding"], want["embedding"], atol=1e-6)
    assert all(np.all(layer.moving_mean.numpy() == 0) for layer in layers)
    assert all(np.all(layer.moving_variance.numpy() == 1) for layer in layers)

    with batch_norm.DeferredMovingStatistics(layers) as recorder:
        with batch_norm.moving_statistics_kept():
            kept(other_images, training=True)
        with pytest.raises(RuntimeError, match="did not run in training mode"):
            recorder.moments()
        kept(images, training=True)
        moments = recorder.moments()
    stem = kept.trunk.stem_conv(images).numpy().astype(np.float64)
    np.testing.assert_allclose(moments[0][0], stem.mean(axis=(0, 1, 2)), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(moments[0][1], stem.var(axis=(0, 1, 2)), rtol=1e-4)
    assert all(np.all(layer.moving_mean.numpy() == 0) for layer in layers)
    # After the block, training calls update the moving statistics again.
    kept(images, training=True)
    assert not np.all(layers[0].moving_mean.numpy() == 0)
