"""The training augmentation's pixel work on a batch, on the accelerator.

With ``--augment_on=device`` the input pipeline stops after the resize
(`weak.resize_crop`, uint8 [S, S, 3]) and ships each example's random
choices (`weak.draw_pixel_params`, drawn from its seed on the host); the
replica step applies them to the whole batch here, so an example's image is
the host path's (`weak.apply_pixel_params`) to float rounding.

Whole-batch tensor ops only (no loop over the examples). Grayscale,
brightness, contrast and saturation are per-pixel colour matrices (a batched
matmul with one 3 x 3 matrix per image), the three blends
``clip(a + f (x - a))`` with anchor ``a`` 0, the mean luma or each pixel's
luma. Each example's random order becomes three blend slots before its hue
shift and three after; a slot applies each example's own adjustment, or a
blend of factor 1 that leaves the image exactly as it was. The scale of the
uint8 levels to [0, 1] and the grayscale matrix fold into the first slot's
matrix (no clip between them on the host either). The hue shift, the costly
step, runs once, straight from RGB (`shift_hue`); the flip is a per-image
gather of the columns.
"""

import tensorflow as tf

from llp_tf.data.augmentation import weak
from llp_tf.data.config import PAPER
from llp_tf.tensor_types import FloatTensor, IntTensor, Tensor

# Adjustment indices of `weak.jitter_with`'s ``order``.
_BRIGHTNESS, _CONTRAST, _SATURATION, _HUE = range(4)
_BLEND_SLOTS = 3
# Hue in sixths of the circle; each channel's own hue, wrapped into [-3, 3).
_SIXTHS = 6.0
_CHANNEL_HUES = (0.0, 2.0, -2.0)


def augment_batch(images: IntTensor, params: dict[str, Tensor],
                  policy: str = PAPER) -> FloatTensor:
    """`weak.apply_pixel_params` of each image of a batch with its own choices.

    Args:
      images: uint8 [B, S, S, 3], resized crops (`weak.resize_crop`).
      params: `weak.draw_pixel_params` entries, each with a leading axis
        [B]: "grayscale" bool [B], "factors" float32 [B, 3], "hue" float32
        [B], "order" int32 [B, 4], "flip" bool [B].
      policy: "paper" or "light" (the images alone).

    Returns:
      float32 [B, S, S, 3] in [0, 1], not normalised.
    """
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
    """`weak.jitter_with` of each image of a batch with its own choices.

    Args:
      images: float32 [B, S, S, 3], in [0, 1] (after ``first``).
      factors: float32 [B, 3], brightness, contrast and saturation factors.
      hue: float32 [B], hue shifts (fractions of the hue circle).
      order: int32 [B, 4], each row a permutation of the adjustments 0-3.
      first: optional float32 [B, 3, 3], a colour matrix applied to each
        image (pixels as row vectors) before the jitter, without a clip.

    Returns:
      float32 [B, S, S, 3] in [0, 1].
    """
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
    """Applies to each image whose ``chosen`` (bool [B]) is set its adjustment
    ``order[:, step]`` (step int or int32 [B]), and to the others a blend
    with factor 1, which leaves them exactly as they are; ``first`` (float32
    [B, 3, 3] or None) is a colour matrix applied before.

    Each blend ``clip(a + f (x - a))`` is per pixel ``clip(x M + o)``: M =
    f I (+ (1 - f) L, L the luma matrix, for saturation), o = (1 - f) mean
    luma for contrast, else 0."""
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
    """float32 [B, S, S, 3] -> [B, 3], each image's channel means, reduced
    over rows first (cheaper than over both axes at once)."""
    return tf.reduce_mean(tf.reduce_mean(images, axis=1), axis=1)


def _luma_matrix():
    """float32 [3, 3]: x L is the luma of x in all three channels."""
    return tf.tile(tf.constant(weak.LUMA_WEIGHTS, tf.float32)[:, None], [1, 3])


def _colour_map(images, matrices):
    """float32 [B, S, S, 3] -> same, each pixel of image b times matrices[b]
    (float32 [B, 3, 3]) as a row vector."""
    shape = tf.shape(images)
    flat = tf.reshape(images, [shape[0], -1, 3])
    return tf.reshape(tf.linalg.matmul(flat, matrices), shape)


def shift_hue(images: FloatTensor, delta: FloatTensor) -> FloatTensor:
    """float32 [B, S, S, 3] in [0, 1] -> same, each image's hue rotated by its
    ``delta`` (float32 [B] in [-0.5, 0.5], fractions of the hue circle):
    `weak.adjust_hue` of each image, to float rounding.

    TF's AdjustHue kernel in elementwise ops: a pixel keeps its largest and
    smallest channel (top, bottom); its hue h, in sixths of the circle, moves
    by 6 delta, and each channel becomes top - chroma * clip(d - 1, 0, 1), d
    the circular distance from h to the channel's own hue (red 0, green 2,
    blue 4). Never outside [top - chroma, top], so no clip."""
    red, green, blue = tf.unstack(images, axis=-1)
    top = tf.maximum(tf.maximum(red, green), blue)
    chroma = top - tf.minimum(tf.minimum(red, green), blue)
    twice = chroma + chroma
    # Hue times chroma, in [-3, 3] chromas: red 0, green 2, blue -2; gray 0.
    turn = tf.where(tf.equal(red, top), green - blue,
                    tf.where(tf.equal(green, top), (blue - red) + twice, (red - green) - twice))
    hue = tf.math.divide_no_nan(turn, chroma)
    # Rather than h, each image's channel hues move back by the shift,
    # wrapped into [-3, 3), so that |h - centre| is within [0, 6].
    centres = tf.constant(_CHANNEL_HUES) - _SIXTHS * tf.cast(delta, tf.float32)[:, None]
    centres = centres - _SIXTHS * tf.floor(centres * (1.0 / _SIXTHS) + 0.5)
    offset = tf.abs(hue[..., None] - centres[:, None, None, :])
    # d - 1 = 2 - |offset - 3|, d = min(offset, 6 - offset).
    fall = tf.clip_by_value(2.0 - tf.abs(offset - 3.0), 0.0, 1.0)
    return top[..., None] - chroma[..., None] * fall


def _per_matrix(chosen):
    """bool [B] -> bool [B, 1, 1], broadcasting over a batch of matrices."""
    return tf.reshape(chosen, [-1, 1, 1])
