"""The evaluation transform: the short side resized to ``round(size * 256 / 224)``, the centre
``size`` x ``size`` crop, normalised as in training."""

import tensorflow as tf

from llp_tf.data.augmentation.weak import normalize
from llp_tf.tensor_types import FloatTensor, IntTensor

EVAL_RESIZE_RATIO = 256.0 / 224.0


def resize_short_side(image: IntTensor | FloatTensor,
                      short_side: int | IntTensor) -> FloatTensor:
    """[H, W, 3] -> float32 in the input's range, resized (long side rounded) so that min(H, W)
    == ``short_side``."""
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = tf.cast(short_side, tf.float32) / tf.reduce_min(shape)
    new_shape = tf.maximum(tf.cast(tf.round(shape * scale), tf.int32), short_side)
    # Set exactly: rounding cannot leave it one pixel short.
    new_shape = tf.where(shape <= tf.reduce_min(shape), short_side, new_shape)
    return tf.image.resize(image, new_shape, method="bilinear", antialias=True)


def center_crop(image: FloatTensor, size: int) -> FloatTensor:
    """The central ``size`` x ``size`` window of [H, W, C], H, W >= size."""
    shape = tf.shape(image)
    top = (shape[0] - size) // 2
    left = (shape[1] - size) // 2
    return image[top:top + size, left:left + size, :]


def eval_short_side(size: int) -> int:
    """int: the short side the evaluation transform resizes to."""
    return int(round(size * EVAL_RESIZE_RATIO))


def eval_preprocess(image: IntTensor, size: int) -> FloatTensor:
    """uint8 [H, W, 3] -> float32 [size, size, 3], normalised: the evaluation transform."""
    scale = 1.0 / 255.0 if image.dtype == tf.uint8 else 1.0
    image = center_crop(resize_short_side(image, eval_short_side(size)), size)
    image = normalize(tf.clip_by_value(image * scale, 0.0, 1.0))
    image.set_shape([size, size, 3])
    return image
