"""The evaluation transform: the short side resized, the centre crop, the
normalisation, against numpy."""

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data.augmentation import eval_transform

# ImageNet's mean and std, written out here rather than read from `weak`.
MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])


def test_eval_preprocess_centre_crop_against_numpy():
    # 37 x 45 with output 32: the short side is already round(32 * 256 / 224) = 37,
    # so the transform is a pure centre crop.
    image = tf.constant(np.random.default_rng(5).integers(0, 256, (37, 45, 3), dtype=np.uint8))
    out = eval_transform.eval_preprocess(image, 32)
    assert out.shape == (32, 32, 3) and out.dtype == tf.float32
    x = image.numpy().astype(np.float64) / 255.0
    expected = (x[2:34, 6:38] - MEAN) / STD
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-5)


@pytest.mark.parametrize("shape, resized", [((100, 50), (146, 73)), ((8, 8), (37, 37)),
                                            ((300, 600), (256, 512))])
def test_eval_short_side(shape, resized):
    size = {(100, 50): 64, (8, 8): 32, (300, 600): 224}[shape]
    assert eval_transform.eval_short_side(size) == min(resized)
    image = eval_transform.resize_short_side(tf.zeros(shape + (3,)),
                                             eval_transform.eval_short_side(size))
    assert tuple(image.shape[:2]) == resized
    assert eval_transform.eval_preprocess(tf.zeros(shape + (3,), tf.uint8),
                                          size).shape == (size, size, 3)
