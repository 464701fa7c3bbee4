"""The training augmentation's pixel work on a batch, on the accelerator
(``--augment_on=device``): each resized crop with its own choices (`weak.draw_pixel_params`),
as `weak.apply_pixel_params` does on the host, to float rounding. Whole-batch ops only: the
blends as one colour matrix per image, in three slots before and after one hue shift."""

import tensorflow as tf

from llp_tf.data.augmentation import weak
from llp_tf.data.config import PAPER
from llp_tf.tensor_types import FloatTensor, IntTensor, Tensor

_BRIGHTNESS, _CONTRAST, _SATURATION, _HUE = range(4)
_BLEND_SLOTS = 3
# Hue in sixths of the circle; each channel's own hue, wrapped into [-3, 3).
_SIXTHS = 6.0
_CHANNEL_HUES = (0.0, 2.0, -2.0)


def augment_batch(images: IntTensor, params: dict[str, Tensor],
                  policy: str = PAPER) -> FloatTensor:
    """float32 [B, S, S, 3] in [0, 1], not normalised: `weak.apply_pixel_params` of each of
    ``images`` (uint8 [B, S, S, 3]) with its own ``params`` (each with a leading [B]); "light"
    leaves the images alone."""
    if policy != PAPER:
        return weak.to_unit(images)
    identity = tf.eye(3, batch_shape=tf.shape(images)[:1])
    to_unit = (1.0 / 255.0) * tf.where(_per_matrix(params["grayscale"]), _luma_matrix(),
                                       identity)
    images = jitter_batch(tf.cast(images, tf.float32), params["factors"], params["hue"],
                          params["order"], first=to_unit)
    side = tf.shape(images)[2]
    columns = tf.range(side)
    columns = tf.where(params["flip"][:, None], side - 1 - columns, columns)
    return tf.gather(images, columns, axis=2, batch_dims=1)


def jitter_batch(images: FloatTensor, factors: FloatTensor, hue: FloatTensor,
                 order: IntTensor, first: FloatTensor | None = None) -> FloatTensor:
    """float32 [B, S, S, 3] in [0, 1]: `weak.jitter_with` of each image with its own
    ``factors`` (float32 [B, 3]), ``hue`` (float32 [B]) and ``order`` (int32 [B, 4]), after
    ``first`` (float32 [B, 3, 3], a colour matrix of row-vector pixels, unclipped) if given."""
    order = tf.cast(order, tf.int32)
    hue_step = tf.argmax(tf.cast(tf.equal(order, _HUE), tf.int32), axis=1,
                         output_type=tf.int32)
    for slot in range(_BLEND_SLOTS):
        images = _blend_slot(images, factors, order, slot, slot < hue_step,
                             first if slot == 0 else None)
    images = shift_hue(images, hue)
    for slot in range(_BLEND_SLOTS):
        step = hue_step + 1 + slot
        images = _blend_slot(images, factors, order, tf.minimum(step, 3), step < 4)
    return images


def _blend_slot(images, factors, order, step, chosen, first=None):
    """Each ``chosen`` (bool [B]) image's adjustment ``order[:, step]``, the others' a blend of
    factor 1 (no change), as one per-pixel ``clip(x M + o)``, after ``first`` if given."""
    steps = tf.broadcast_to(step, tf.shape(order)[:1])
    adjustment = tf.gather(order, steps[:, None], batch_dims=1)[:, 0]
    # An unchosen example may name the hue here; its factor is dropped.
    factor = tf.gather(factors, tf.minimum(adjustment, _SATURATION)[:, None], batch_dims=1)[:, 0]
    factor = tf.where(chosen, factor, 1.0)
    saturation = tf.where(chosen & tf.equal(adjustment, _SATURATION), 1.0 - factor, 0.0)
    matrix = (factor[:, None, None] * tf.eye(3, batch_shape=tf.shape(factor))
              + saturation[:, None, None] * _luma_matrix())
    means = _channel_means(images)
    if first is not None:
        matrix = tf.linalg.matmul(first, matrix)
        means = tf.linalg.matvec(first, means, transpose_a=True)
    mean_luma = tf.linalg.matvec(means, tf.constant(weak.LUMA_WEIGHTS, tf.float32))
    contrast = chosen & tf.equal(adjustment, _CONTRAST)
    offset = tf.where(contrast, (1.0 - factor) * mean_luma, 0.0)
    return tf.clip_by_value(_colour_map(images, matrix) + offset[:, None, None, None], 0.0, 1.0)


def _channel_means(images):
    """float32 [B, S, S, 3] -> [B, 3], each image's channel means."""
    return tf.reduce_mean(tf.reduce_mean(images, axis=1), axis=1)


def _luma_matrix():
    """float32 [3, 3]: x L is the luma of x in all three channels."""
    return tf.tile(tf.constant(weak.LUMA_WEIGHTS, tf.float32)[:, None], [1, 3])


def _colour_map(images, matrices):
    """float32 [B, S, S, 3] -> same, image b's pixels (row vectors) times matrices[b]."""
    shape = tf.shape(images)
    flat = tf.reshape(images, [shape[0], -1, 3])
    return tf.reshape(tf.linalg.matmul(flat, matrices), shape)


def shift_hue(images: FloatTensor, delta: FloatTensor) -> FloatTensor:
    """float32 [B, S, S, 3] in [0, 1] -> same, each image's hue turned by its ``delta``
    (float32 [B], of the circle): `weak.adjust_hue` to float rounding, as TF's AdjustHue kernel
    computes it, in elementwise ops."""
    red, green, blue = tf.unstack(images, axis=-1)
    top = tf.maximum(tf.maximum(red, green), blue)
    chroma = top - tf.minimum(tf.minimum(red, green), blue)
    twice = chroma + chroma
    turn = tf.where(tf.equal(red, top), green - blue,
                    tf.where(tf.equal(green, top), (blue - red) + twice, (red - green) - twice))
    hue = tf.math.divide_no_nan(turn, chroma)
    centres = tf.constant(_CHANNEL_HUES) - _SIXTHS * tf.cast(delta, tf.float32)[:, None]
    centres = centres - _SIXTHS * tf.floor(centres * (1.0 / _SIXTHS) + 0.5)
    offset = tf.abs(hue[..., None] - centres[:, None, None, :])
    fall = tf.clip_by_value(2.0 - tf.abs(offset - 3.0), 0.0, 1.0)
    return top[..., None] - chroma[..., None] * fall


def _per_matrix(chosen):
    return tf.reshape(chosen, [-1, 1, 1])
