"""Device-side pixel work: each image of a batch equals the host path's
(`weak.apply_pixel_params`) with its own choices, in every jitter order."""

import functools
import itertools

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data.augmentation import weak, weak_device
from llp_tf.data.config import LIGHT, PAPER

ORDERS = list(itertools.permutations(range(4)))
# Float rounding of the blends written as colour matrices and of the batched
# hue shift; measured 1.0e-6 on the 288 examples below (2.9e-6 at 224 px).
ATOL = 1e-5
SIZE = 12


def _images(count, seed=0):
    """uint8 [count, SIZE, SIZE, 3]: random colours, with gray rows and the
    extreme levels (where hue is undefined and clipping bites)."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (count, SIZE, SIZE, 3), dtype=np.uint8)
    images[:, ::4] = images[:, ::4, :, :1]
    images[:, 1, :4] = 0
    images[:, 2, :4] = 255
    return tf.constant(images)


def _drawn(count, first_seed=0):
    """draw_pixel_params of ``count`` seeds, each entry with a leading [count]."""
    seeds = tf.stack([tf.fill([count], 3), tf.range(first_seed, first_seed + count)], axis=1)
    draws = tf.data.Dataset.from_tensor_slices(tf.cast(seeds, tf.int64)).map(
        weak.draw_pixel_params).batch(count)
    return {key: value.numpy() for key, value in next(iter(draws)).items()}


def _every_choice(count):
    """Drawn choices with order, grayscale and flip set so that each of the 24
    orders meets each of the four (grayscale, flip) settings."""
    params = _drawn(count)
    index = np.arange(count)
    params["order"] = np.array([ORDERS[k % 24] for k in index], np.int32)
    params["grayscale"] = (index // 24) % 2 == 1
    params["flip"] = (index // 48) % 2 == 1
    return params


@functools.cache
def _host_fn(policy):
    """One example's host path as one tf.function per policy, its trace shared by the tests."""
    return tf.function(
        lambda image, choice: weak.apply_pixel_params(weak.to_unit(image), choice, policy))


def _host(images, params, policy=PAPER):
    """The host path: apply_pixel_params of one example at a time, in tf.data."""
    examples = tf.data.Dataset.from_tensor_slices((images, params)).map(_host_fn(policy))
    return next(iter(examples.batch(len(images)))).numpy()


@functools.cache
def _device_fn(policy, jit_compile):
    """augment_batch as one tf.function per policy and compiler (a trace per batch shape)."""
    return tf.function(lambda x, p: weak_device.augment_batch(x, p, policy),
                       jit_compile=jit_compile)


def _device(images, params, policy=PAPER, jit_compile=False):
    return _device_fn(policy, jit_compile)(images, params).numpy()


def test_each_image_is_the_host_paths():
    images, params = _images(288), _every_choice(288)
    got, want = _device(images, params), _host(images, params)
    assert got.shape == (288, SIZE, SIZE, 3) and got.dtype == np.float32
    difference = np.abs(got - want).max(axis=(1, 2, 3))
    assert difference.max() < ATOL, difference.max()
    assert got.min() >= 0.0 and got.max() <= 1.0
    # The choices change the images: grayscale ones are gray, others are not.
    gray = params["grayscale"]
    assert np.abs(got[gray] - got[gray][..., :1]).max() < ATOL
    assert np.abs(got[~gray] - got[~gray][..., :1]).max() > 0.1


def test_flip_and_grayscale_selection_are_exact():
    images, params = _images(48, seed=1), _every_choice(48)
    mirrored = dict(params, flip=~params["flip"])
    got = _device(images, params)
    np.testing.assert_array_equal(_device(images, mirrored), got[:, :, ::-1])
    # Without grayscale, the jitter of a gray image is the jitter of its luma.
    gray_images = tf.cast(tf.round(weak.grayscale_luma(weak.to_unit(images)) * 255.0),
                          tf.uint8)
    gray_images = tf.tile(gray_images, [1, 1, 1, 3])
    no_gray = dict(params, grayscale=np.zeros(48, bool))
    np.testing.assert_allclose(_device(gray_images, no_gray), _host(gray_images, no_gray),
                               atol=ATOL)


def test_each_example_keeps_its_own_order():
    """One image and one set of factors in all 24 orders: 24 different images,
    each the host path's for its order (ignoring the order, or taking one
    example's order for all, fails). Without clipping the three blends
    commute; factors of 1.4 clip enough to tell every order apart."""
    images = tf.repeat(_images(1, seed=2), 24, axis=0)
    params = {key: np.repeat(value[:1], 24, axis=0) for key, value in _drawn(1, 5).items()}
    params.update(order=np.array(ORDERS, np.int32), grayscale=np.zeros(24, bool),
                  factors=np.full((24, 3), 1.4, np.float32),
                  hue=np.full(24, 0.3, np.float32))
    got = _device(images, params)
    np.testing.assert_allclose(got, _host(images, params), atol=ATOL)
    gaps = [np.abs(got[i] - got[j]).max() for i, j in itertools.combinations(range(24), 2)]
    assert min(gaps) > 0.01


def test_light_is_the_images_alone():
    images, params = _images(8, seed=3), _drawn(8)
    got = _device(images, params, LIGHT)
    np.testing.assert_array_equal(got, images.numpy().astype(np.float32) * np.float32(1 / 255))
    np.testing.assert_array_equal(got, _host(images, params, LIGHT))


def test_runs_under_xla():
    images, params = _images(24, seed=4), _every_choice(24)
    np.testing.assert_allclose(_device(images, params, jit_compile=True),
                               _host(images, params), atol=ATOL)


@pytest.mark.parametrize("delta", [-0.5, -0.4, -0.13, 0.0, 0.07, 0.25, 0.4, 0.5])
def test_shift_hue_is_adjust_hue(delta):
    images = weak.to_unit(_images(4, seed=5))
    deltas = tf.constant([delta, -delta, delta / 2, 0.33], tf.float32)
    got = weak_device.shift_hue(images, deltas).numpy()
    want = np.stack([weak.adjust_hue(images[k], deltas[k]).numpy() for k in range(4)])
    np.testing.assert_allclose(got, want, atol=2e-6)


def _hue_corner_cases(count, seed):
    """float32 [count, 8, 24, 3] in [0, 1]: random colours, grays, the
    saturated primaries and secondaries, black and white, and pixels with two
    equal channels (the sector borders of the hue)."""
    rng = np.random.default_rng(seed)
    images = rng.random((count, 8, 24, 3), dtype=np.float32)
    images[:, 0] = images[:, 0, :, :1]
    images[:, 1] = rng.integers(0, 2, (count, 24, 3))
    images[:, 2, :12] = 0.0
    images[:, 2, 12:] = 1.0
    for row, (a, b) in enumerate([(0, 1), (1, 2), (0, 2)], start=3):
        images[:, row, :, b] = images[:, row, :, a]
    images[:, 6] = np.round(images[:, 6] * 255) / 255
    return images


def test_shift_hue_is_tf_adjust_hue_over_many_images_and_deltas():
    images = _hue_corner_cases(64, seed=6)
    deltas = np.concatenate([[-0.5, 0.5, 0.0, -1 / 6, 1 / 6, 1 / 3, -1 / 3, 0.25],
                             np.random.default_rng(7).uniform(-0.5, 0.5, 56)]).astype(np.float32)
    got = tf.function(weak_device.shift_hue)(tf.constant(images), tf.constant(deltas)).numpy()
    want = np.stack([tf.image.adjust_hue(images[k], deltas[k]).numpy() for k in range(64)])
    np.testing.assert_allclose(got, want, atol=2e-6)
    # In [0, 1] with no clip; grays, black and white stay as they were.
    assert got.min() >= 0.0 and got.max() <= 1.0
    np.testing.assert_array_equal(got[:, 0], images[:, 0])
    np.testing.assert_array_equal(got[:, 2], images[:, 2])
