"""The evaluation transform: resize the short side to ``round(size * 256 /
224)``, centre crop ``size`` x ``size``, normalise as training does
(`weak.normalize`).

Images come in as uint8 [H, W, 3] and leave as float32 [size, size, 3].
"""

import tensorflow as tf

from llp_tf.data.augmentation.weak import normalize
from llp_tf.tensor_types import FloatTensor, IntTensor

EVAL_RESIZE_RATIO = 256.0 / 224.0


def resize_short_side(image: IntTensor | FloatTensor,
                      short_side: int | IntTensor) -> FloatTensor:
    """Resizes [H, W, 3] so that min(H, W) == short_side, keeping the aspect
    ratio (the long side rounded). Returns float32 in the input's range."""
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = tf.cast(short_side, tf.float32) / tf.reduce_min(shape)
    new_shape = tf.maximum(tf.cast(tf.round(shape * scale), tf.int32), short_side)
    # The short side is set exactly so rounding cannot leave it one pixel short.
    new_shape = tf.where(shape <= tf.reduce_min(shape), short_side, new_shape)
    return tf.image.resize(image, new_shape, method="bilinear", antialias=True)


def center_crop(image: FloatTensor, size: int) -> FloatTensor:
    """Central ``size`` x ``size`` window of [H, W, C] (H, W >= size)."""
    shape = tf.shape(image)
    top = (shape[0] - size) // 2
    left = (shape[1] - size) // 2
    return image[top:top + size, left:left + size, :]


def eval_short_side(size: int) -> int:
    """int: the short side the evaluation transform resizes to."""
    return int(round(size * EVAL_RESIZE_RATIO))


def eval_preprocess(image: IntTensor, size: int) -> FloatTensor:
    """The evaluation transform.

    Args:
      image: uint8 [H, W, 3].
      size: int, output side S.

    Returns:
      float32 [S, S, 3], normalised.
    """
    scale = 1.0 / 255.0 if image.dtype == tf.uint8 else 1.0
    # Crop before scaling and normalising: only the window is touched.
    image = center_crop(resize_short_side(image, eval_short_side(size)), size)
    image = normalize(tf.clip_by_value(image * scale, 0.0, 1.0))
    image.set_shape([size, size, 3])
    return image
