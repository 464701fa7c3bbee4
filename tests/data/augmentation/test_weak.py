"""The weak augmentation: shapes, dtypes, ranges, determinism, and values against numpy."""

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data.augmentation import weak

MEAN = np.array(weak.IMAGENET_MEAN)
STD = np.array(weak.IMAGENET_STD)
LOW, HIGH = (0 - MEAN) / STD, (1 - MEAN) / STD


def _image(height, width, seed=0):
    return tf.constant(np.random.default_rng(seed).integers(0, 256, (height, width, 3),
                                                           dtype=np.uint8))


def _seed(k):
    return tf.constant([11, k], tf.int64)


@pytest.mark.parametrize("shape, size", [
    ((1, 1), 24), ((1, 57), 24), ((57, 1), 24), ((24, 24), 24), ((23, 25), 24),
    ((300, 210), 24), ((211, 700), 224), ((330, 450), 224), ((100, 150), 224)])
def test_resize_crop_is_tensorflows_antialiased_bilinear_rounded(shape, size):
    # The exact pixels of tf.image.resize's antialiased bilinear, rounded
    # (what resize_crop computed before its faster two passes), on noise and
    # on a saturated image (no level may leave [0, 255]).
    resize = tf.function(lambda crop: weak.resize_crop(crop, size))
    saturated = tf.fill(shape + (3,), tf.constant(255, tf.uint8))
    for image in (_image(*shape, seed=sum(shape)), saturated):
        want = tf.image.resize(image, [size, size], method="bilinear", antialias=True)
        want = tf.cast(tf.clip_by_value(tf.round(want), 0.0, 255.0), tf.uint8)
        got = resize(image)
        assert got.dtype == tf.uint8 and got.shape == (size, size, 3)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("shape, size", [((40, 30), 24), ((8, 8), 32), ((30, 90), 16)])
def test_train_augment_shape_dtype_range(shape, size):
    out = weak.train_augment(_image(*shape), _seed(0), size)
    assert out.shape == (size, size, 3) and out.dtype == tf.float32
    out = out.numpy()
    assert np.all(out >= LOW - 1e-5) and np.all(out <= HIGH + 1e-5)


def test_train_augment_is_a_function_of_the_seed():
    image = _image(40, 30)
    first = weak.train_augment(image, _seed(1), 16).numpy()
    np.testing.assert_array_equal(first, weak.train_augment(image, _seed(1), 16).numpy())
    assert not np.allclose(first, weak.train_augment(image, _seed(2), 16).numpy())


def test_train_augment_in_tf_function_matches_eager():
    image = _image(20, 24)
    graph = tf.function(lambda x, s: weak.train_augment(x, s, 12))
    np.testing.assert_allclose(graph(image, _seed(4)).numpy(),
                               weak.train_augment(image, _seed(4), 12).numpy(), atol=1e-5)


def test_crop_window_area_and_aspect():
    areas, aspects = [], []
    for k in range(200):
        top, left, h, w = (int(v) for v in weak.crop_window([100, 80, 3], _seed(k)))
        assert 0 <= top and top + h <= 100 and 0 <= left and left + w <= 80
        areas.append(h * w / 8000)
        aspects.append(w / h)
    # Rounding the box to whole pixels moves area and ratio a little.
    assert 0.19 <= min(areas) and max(areas) <= 1.0
    assert 0.72 <= min(aspects) and max(aspects) <= 1.36
    assert np.mean(areas) == pytest.approx(0.55, abs=0.08)


def test_crop_window_falls_back_to_centre_crop():
    # A 1-pixel-high strip admits no box with area >= 0.2 and aspect <= 4/3.
    top, left, h, w = (int(v) for v in weak.crop_window([1, 200, 3], _seed(0)))
    assert (top, h, w) == (0, 1, 1) and left == (200 - 1) // 2


def _luma(x):
    return x @ np.array([0.299, 0.587, 0.114])


def test_colour_adjustments_against_numpy():
    x = np.random.default_rng(1).random((5, 6, 3)).astype(np.float32)
    t = tf.constant(x)
    np.testing.assert_allclose(weak.adjust_brightness(t, 1.3).numpy(),
                               np.clip(x * 1.3, 0, 1), atol=1e-6)
    mean = _luma(x).mean()
    np.testing.assert_allclose(weak.adjust_contrast(t, 0.7).numpy(),
                               np.clip(mean + 0.7 * (x - mean), 0, 1), atol=1e-6)
    gray = _luma(x)[..., None]
    np.testing.assert_allclose(weak.adjust_saturation(t, 1.4).numpy(),
                               np.clip(gray + 1.4 * (x - gray), 0, 1), atol=1e-6)
    red = tf.constant([[[1.0, 0.0, 0.0]]])
    # A third of the hue circle turns red into green.
    np.testing.assert_allclose(weak.adjust_hue(red, 1 / 3).numpy(), [[[0, 1, 0]]], atol=1e-5)


def test_grayscale_and_flip_probabilities():
    x = tf.constant(np.random.default_rng(2).random((4, 5, 3)).astype(np.float32))
    gray = np.repeat(_luma(x.numpy())[..., None], 3, axis=-1)
    np.testing.assert_allclose(weak.random_grayscale(x, _seed(0), 1.0).numpy(), gray,
                               atol=1e-6)
    np.testing.assert_array_equal(weak.random_grayscale(x, _seed(0), 0.0).numpy(), x.numpy())
    np.testing.assert_array_equal(weak.random_flip(x, _seed(0), 1.0).numpy(),
                                  x.numpy()[:, ::-1])
    grays = sum(bool(np.allclose(weak.random_grayscale(x, _seed(k)).numpy(), gray))
                for k in range(400))
    flips = sum(bool(np.array_equal(weak.random_flip(x, _seed(k)).numpy(), x.numpy()[:, ::-1]))
                for k in range(400))
    # Binomial(400, p) within about four standard deviations.
    assert 80 - 32 <= grays <= 80 + 32
    assert 200 - 40 <= flips <= 200 + 40


def test_jitter_order_varies_with_the_seed():
    x = tf.constant(np.random.default_rng(3).random((6, 6, 3)).astype(np.float32))
    results = {weak.color_jitter(x, _seed(k)).numpy().tobytes() for k in range(10)}
    assert len(results) == 10
    out = weak.color_jitter(x, _seed(0)).numpy()
    assert out.min() >= 0 and out.max() <= 1


def test_normalize():
    x = np.random.default_rng(4).random((3, 2, 3)).astype(np.float32)
    np.testing.assert_allclose(weak.normalize(tf.constant(x)).numpy(), (x - MEAN) / STD,
                               atol=1e-6)


def test_light_policy_is_the_crop_alone():
    rng = np.random.default_rng(5)
    image = tf.constant(rng.integers(0, 256, (20, 24, 3)), tf.uint8)
    seed = tf.constant([7, 11], tf.int64)
    got = weak.train_augment(image, seed, 16, "light").numpy()
    crop_seed = tf.unstack(tf.random.experimental.stateless_split(seed, num=4))[0]
    want = weak.normalize(weak.random_resized_crop(
        image, crop_seed, 16, area_range=(0.2, 1.0))).numpy()
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, weak.train_augment(image, seed, 16, "paper").numpy())
    with pytest.raises(ValueError, match="policy"):
        weak.train_augment(image, seed, 16, "strong")


def test_the_config_offers_the_policies_augment_knows():
    from llp_tf.data.config import AUGMENTATIONS
    from llp_tf.training.config import settings_fields
    _, field = settings_fields()["augmentation"]
    assert field.metadata["choices"] == AUGMENTATIONS == ("paper", "light")
    image, seed = _image(12, 12, seed=1), tf.constant([1, 2], tf.int64)
    for policy in AUGMENTATIONS:
        assert weak.train_augment(image, seed, 8, policy).shape == (8, 8, 3)


def test_min_crop_area_sets_the_crop_of_either_policy():
    image = _image(20, 24, seed=3)
    seed = tf.constant([7, 12], tf.int64)
    seeds = tf.unstack(tf.random.experimental.stateless_split(seed, num=4))
    got = weak.train_augment(image, seed, 16, "light", min_crop_area=0.6).numpy()
    want = weak.normalize(weak.random_resized_crop(
        image, seeds[0], 16, area_range=(0.6, 1.0))).numpy()
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, weak.train_augment(image, seed, 16, "light").numpy())

    # The paper policy keeps its other steps after the crop.
    got = weak.train_augment(image, seed, 16, "paper", min_crop_area=0.6).numpy()
    crop = weak.random_resized_crop(image, seeds[0], 16, area_range=(0.6, 1.0))
    crop = weak.random_grayscale(crop, seeds[1])
    crop = weak.color_jitter(crop, seeds[2])
    want = weak.normalize(weak.random_flip(crop, seeds[3])).numpy()
    np.testing.assert_allclose(got, want, atol=1e-6)

    for bad in (0.0, 1.2):
        with pytest.raises(ValueError, match="min_crop_area"):
            weak.train_augment(image, seed, 16, "light", min_crop_area=bad)
