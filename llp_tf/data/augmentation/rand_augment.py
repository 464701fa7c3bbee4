"""Strong augmentation: RandAugment as FixMatch used it, followed by Cutout.

Pure functions of one image, like `weak`: every random choice is a
stateless op driven by an explicit ``seed`` (int32/int64 [2]), so an image's
strong view is a function of (run seed, epoch, example index) and does not
depend on tf.data's parallelism. `strong_augment` draws from its own stream
of the seed (`strong_seeds`), so it may be given the same example seed as
`weak.train_augment` without its draws repeating the crop's or flip's.

Contract: images come in as float32 [H, W, 3] in [0, 1] (uint8 is scaled
by 1/255), after the crop and flip and before `weak.normalize`, and leave
as float32 [H, W, 3] in [0, 1].

`strong_augment` (Sohn et al. 2020, FixMatch's RandAugment with random
magnitude): ``NUM_OPS`` = 2 ops drawn uniformly, with replacement, from the
policy's list, each with its own magnitude uniform in the op's range, always
applied, in order; then Cutout, always: a grey square of side
``round(L * min(H, W))``, L uniform in [0, max], centred on a uniform pixel
and clipped at the border. Geometric ops map about the image centre with
nearest-neighbour sampling (PIL's default, as in FixMatch's code); the area
they uncover and the Cutout square are grey 0.5 (FixMatch's 128).

Magnitude ranges. "paper": FixMatch's appendix table of the RandAugment
ops (Table 12) and its Cutout side, L in [0, 0.5] of the image; "light":
for the 28 px digit demos (docs/augmentation.md, "Strong augmentation"):

| op            | magnitude                             | paper        | light           |
|---------------|---------------------------------------|--------------|-----------------|
| auto_contrast | (none)                                | yes          | yes             |
| brightness    | blend factor with black, 1 = original | [0.05, 0.95] | [0.05, 0.95]    |
| color         | blend factor with the luma image      | [0.05, 0.95] | left out        |
| contrast      | blend factor with the mean luma       | [0.05, 0.95] | [0.05, 0.95]    |
| equalize      | (none)                                | yes          | yes             |
| identity      | (none)                                | yes          | yes             |
| posterize     | bits kept of 8                        | {4, ..., 8}  | {4, ..., 8}     |
| rotate        | degrees, counter-clockwise            | [-30, 30]    | [-15, 15]       |
| sharpness     | blend factor with PIL's SMOOTH filter | [0.05, 0.95] | [0.05, 0.95]    |
| shear_x/y     | rate R: x += R * (y - centre)         | [-0.3, 0.3]  | [-0.15, 0.15]   |
| solarize      | T: invert where 255 x >= 256 T        | [0, 1]       | left out        |
| translate_x/y | fraction of the width / height        | [-0.3, 0.3]  | [-0.125, 0.125] |
| cutout        | side L of min(H, W)                   | [0, 0.5]     | [0, 0.25]       |

Where FixMatch's code departs from that table (its CIFAR RandAugment
applies each op with p = 0.5, on 10 magnitude levels, with enhancement
factors 0.1 + 1.8 * level, shears about the top-left corner and a fixed
half-side Cutout) this module follows the table.
"""

import math
from typing import NamedTuple

import tensorflow as tf

from llp_tf.data.augmentation.weak import (
    CROP_AREA_RANGE, adjust_brightness, adjust_contrast, adjust_saturation, check_policy)
from llp_tf.data.config import LIGHT, PAPER
from llp_tf.tensor_types import FloatTensor, IntTensor, Tensor

NUM_OPS = 2
#: Grey of the area geometric ops uncover and of the Cutout square.
FILL = 0.5
INTERPOLATION = "NEAREST"

# Folded into the example's seed before any draw: a stream of its own.
_STRONG_SALT = 0x5752


class OpRange(NamedTuple):
    """An op of a policy and its magnitude range; an ``integer`` magnitude is
    uniform over the integers low..high, a float one uniform in [low, high)."""

    name: str
    low: float = 0.0
    high: float = 0.0
    integer: bool = False


_PHOTOMETRIC = (OpRange("auto_contrast"), OpRange("brightness", 0.05, 0.95),
                OpRange("contrast", 0.05, 0.95), OpRange("equalize"), OpRange("identity"),
                OpRange("posterize", 4, 8, integer=True), OpRange("sharpness", 0.05, 0.95))

#: The ops of each policy, in a fixed order (an op's index is its position).
POLICY_OPS = {
    PAPER: _PHOTOMETRIC + (
        OpRange("color", 0.05, 0.95), OpRange("rotate", -30.0, 30.0),
        OpRange("shear_x", -0.3, 0.3), OpRange("shear_y", -0.3, 0.3),
        OpRange("solarize", 0.0, 1.0),
        OpRange("translate_x", -0.3, 0.3), OpRange("translate_y", -0.3, 0.3)),
    LIGHT: _PHOTOMETRIC + (
        OpRange("rotate", -15.0, 15.0),
        OpRange("shear_x", -0.15, 0.15), OpRange("shear_y", -0.15, 0.15),
        OpRange("translate_x", -0.125, 0.125), OpRange("translate_y", -0.125, 0.125)),
}
#: Largest Cutout side, a fraction of the image's shorter side.
CUTOUT_MAX_FRACTION = {PAPER: 0.5, LIGHT: 0.25}


def _levels(image):
    """int32 [..., H, W, 3]: the 8-bit levels of float32 [..., H, W, 3] in [0, 1]."""
    return tf.cast(tf.round(image * 255.0), tf.int32)


def _from_levels(levels):
    """float32 of the shape of ``levels`` (int32 in 0..255): level / 255.

    A lookup of the correctly rounded quotients, not a division: in a
    tf.function Grappler turns division by a constant into multiplication by
    its reciprocal, which differs in the last bit for half of the levels."""
    return tf.gather(tf.constant([level / 255.0 for level in range(256)], tf.float32), levels)


def auto_contrast(image: FloatTensor) -> FloatTensor:
    """Stretches each channel linearly so that its minimum becomes 0 and its
    maximum 1 (PIL's autocontrast without its 8-bit rounding); a constant
    channel is left as it is. float32 [..., H, W, 3] in [0, 1] -> same, each
    image on its own."""
    low = tf.reduce_min(image, axis=[-3, -2], keepdims=True)
    span = tf.reduce_max(image, axis=[-3, -2], keepdims=True) - low
    stretched = (image - low) / tf.where(span > 0.0, span, 1.0)
    return tf.where(span > 0.0, stretched, image)


def equalize(image: FloatTensor) -> FloatTensor:
    """PIL's histogram equalisation of each channel's 8-bit levels.

    A level l maps to ``(step // 2 + number of pixels below l) // step``
    (at most 255), where ``step = (pixels - pixels in the highest occupied
    level) // 255``; a channel with ``step == 0`` is left as it is. The
    output is quantised to 8-bit levels. float32 [..., H, W, 3] in [0, 1] ->
    same, each image on its own.
    """
    shape = tf.shape(image)
    levels = tf.reshape(_levels(image), tf.concat([[-1], shape[-3:]], 0))
    # One histogram of 256 bins per image and channel: level l of channel c of
    # image n counts in bin (3 n + c) 256 + l.
    histograms = 3 * tf.shape(levels)[0]
    offsets = tf.reshape(tf.range(histograms, dtype=tf.int32) * 256, [-1, 1, 1, 3])
    flat_levels = levels + offsets
    histogram = tf.reshape(tf.math.bincount(tf.reshape(flat_levels, [-1]),
                                            minlength=histograms * 256,
                                            maxlength=histograms * 256, dtype=tf.int32),
                           [histograms, 256])
    highest = tf.reduce_max(tf.where(histogram > 0, tf.range(256), -1), axis=1)
    in_highest = tf.gather(histogram, highest, batch_dims=1)
    step = (tf.reduce_sum(histogram, axis=1) - in_highest) // 255
    below = tf.cumsum(histogram, axis=1, exclusive=True)
    lut = tf.minimum((step[:, None] // 2 + below) // tf.maximum(step[:, None], 1), 255)
    lut = tf.where(step[:, None] > 0, lut, tf.range(256))
    return tf.reshape(_from_levels(tf.gather(tf.reshape(lut, [-1]), flat_levels)), shape)


def posterize(image: FloatTensor, bits: IntTensor | FloatTensor) -> FloatTensor:
    """Keeps the ``bits`` (1..8, broadcast against the image) highest bits of
    each 8-bit level. float32 [..., H, W, 3] in [0, 1] -> same, quantised to
    8-bit levels."""
    shift = 8 - tf.cast(bits, tf.int32)
    kept = tf.bitwise.left_shift(tf.bitwise.right_shift(_levels(image), shift), shift)
    return _from_levels(kept)


def solarize(image: FloatTensor, threshold: float | FloatTensor) -> FloatTensor:
    """Inverts (x -> 1 - x) the values whose 8-bit level 255 x is at least
    256 * ``threshold`` (PIL's solarize at threshold 256 T): T = 0 inverts
    everything, T = 1 nothing. float32 [..., H, W, 3] in [0, 1], ``threshold``
    broadcast against it -> same."""
    return tf.where(image * 255.0 >= 256.0 * threshold, 1.0 - image, image)


_SMOOTH_KERNEL = ((1.0, 1.0, 1.0), (1.0, 5.0, 1.0), (1.0, 1.0, 1.0))


def sharpness(image: FloatTensor, factor: float | FloatTensor) -> FloatTensor:
    """PIL's sharpness: blends the image with its 3x3 SMOOTH filtering
    (weights 1, centre 5, over 13; the border pixels are kept), ``factor``
    1 = the image, 0 = the smoothed one. float32 [..., H, W, 3] in [0, 1], H
    and W at least 3, ``factor`` broadcast against it -> same, each image on
    its own."""
    shape = tf.shape(image)
    images = tf.reshape(image, tf.concat([[-1], shape[-3:]], 0))
    kernel = tf.constant(_SMOOTH_KERNEL) / 13.0
    kernel = tf.tile(kernel[:, :, None, None], [1, 1, 3, 1])
    smooth = tf.nn.depthwise_conv2d(images, kernel, [1, 1, 1, 1], "VALID")
    smooth = tf.reshape(tf.pad(smooth, [[0, 0], [1, 1], [1, 1], [0, 0]]), shape)
    interior = tf.pad(tf.ones([shape[-3] - 2, shape[-2] - 2, 1], tf.bool), [[1, 1], [1, 1], [0, 0]])
    degenerate = tf.where(interior, smooth, image)
    blended = tf.clip_by_value(degenerate + factor * (image - degenerate), 0.0, 1.0)
    blended.set_shape(image.shape)
    return blended


#: The geometric ops: each samples the image through an affine map about
#: its centre (`affine_coefficients`).
GEOMETRIC = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")


def affine_coefficients(name: str, magnitude: float | FloatTensor, height: FloatTensor,
                        width: FloatTensor) -> tuple[FloatTensor, ...]:
    """The map of geometric op ``name`` (in `GEOMETRIC`) with ``magnitude``
    (float32, any shape) on images of ``height`` x ``width`` (float32,
    broadcast against it): (a, b, c, d, shift_x, shift_y), float32 of the
    magnitude's shape, for `projective_transform`."""
    magnitude = tf.cast(magnitude, tf.float32)
    one, zero = tf.ones_like(magnitude), tf.zeros_like(magnitude)
    if name == "rotate":
        angle = magnitude * (math.pi / 180.0)
        cos, sin = tf.cos(angle), tf.sin(angle)
        return cos, -sin, sin, cos, zero, zero
    if name == "shear_x":
        return one, magnitude, zero, one, zero, zero
    if name == "shear_y":
        return one, zero, magnitude, one, zero, zero
    if name == "translate_x":
        return one, zero, zero, one, magnitude * width, zero
    if name == "translate_y":
        return one, zero, zero, one, zero, magnitude * height
    raise ValueError(f"not a geometric op: {name!r}")


def projective_transform(coefficients: tuple[FloatTensor, ...], height: FloatTensor,
                         width: FloatTensor) -> FloatTensor:
    """float32 [..., 8], ImageProjectiveTransformV3's transforms for the
    `affine_coefficients` (a, b, c, d, shift_x, shift_y), each float32 [...]:
    output pixel p takes the input at ``((a, b), (c, d)) @ (p - centre) +
    centre - shift`` (x, y pixel coordinates, the centre ((W - 1) / 2,
    (H - 1) / 2))."""
    a, b, c, d, shift_x, shift_y = coefficients
    centre_x = (width - 1.0) / 2.0
    centre_y = (height - 1.0) / 2.0
    zero = tf.zeros_like(a)
    return tf.stack([a, b, centre_x - a * centre_x - b * centre_y - shift_x,
                     c, d, centre_y - c * centre_x - d * centre_y - shift_y, zero, zero], axis=-1)


def warp(images: FloatTensor, transforms: FloatTensor) -> FloatTensor:
    """float32 [B, H, W, 3] -> same: each image sampled through its
    `projective_transform` (float32 [B, 8]), nearest neighbour; outside the
    image it is ``FILL``."""
    moved = tf.raw_ops.ImageProjectiveTransformV3(
        images=images, transforms=transforms, output_shape=tf.shape(images)[1:3],
        fill_value=FILL, interpolation=INTERPOLATION, fill_mode="CONSTANT")
    moved.set_shape(images.shape)
    return moved


def _affine(image, name, magnitude):
    """float32 [H, W, 3] -> same: geometric op ``name`` with ``magnitude``."""
    shape = tf.cast(tf.shape(image), tf.float32)
    coefficients = affine_coefficients(name, magnitude, shape[0], shape[1])
    return warp(image[None], projective_transform(coefficients, shape[0], shape[1])[None])[0]


def rotate(image: FloatTensor, degrees: float | FloatTensor) -> FloatTensor:
    """Rotates [H, W, 3] counter-clockwise by ``degrees`` about its centre."""
    return _affine(image, "rotate", degrees)


def shear_x(image: FloatTensor, rate: float | FloatTensor) -> FloatTensor:
    """Shears [H, W, 3] along x: output (x, y) takes input (x + rate * (y - cy), y)."""
    return _affine(image, "shear_x", rate)


def shear_y(image: FloatTensor, rate: float | FloatTensor) -> FloatTensor:
    """Shears [H, W, 3] along y: output (x, y) takes input (x, y + rate * (x - cx))."""
    return _affine(image, "shear_y", rate)


def translate_x(image: FloatTensor, fraction: float | FloatTensor) -> FloatTensor:
    """Moves the content of [H, W, 3] right by ``fraction`` of its width
    (rounded to whole pixels by the nearest-neighbour sampling)."""
    return _affine(image, "translate_x", fraction)


def translate_y(image: FloatTensor, fraction: float | FloatTensor) -> FloatTensor:
    """Moves the content of [H, W, 3] down by ``fraction`` of its height."""
    return _affine(image, "translate_y", fraction)


#: Each op as a function of (image, magnitude).
OP_FUNCTIONS = {
    "auto_contrast": lambda image, _: auto_contrast(image),
    "brightness": adjust_brightness,
    "color": adjust_saturation,
    "contrast": adjust_contrast,
    "equalize": lambda image, _: equalize(image),
    "identity": lambda image, _: image,
    "posterize": posterize,
    "rotate": rotate,
    "sharpness": sharpness,
    "shear_x": shear_x,
    "shear_y": shear_y,
    "solarize": solarize,
    "translate_x": translate_x,
    "translate_y": translate_y,
}


def strong_seeds(seed: IntTensor) -> tuple[IntTensor, IntTensor]:
    """(ops seed, cutout seed), int [2] each: the sub-seeds of an example's
    ``seed`` (int32/int64 [2]) that `strong_augment` draws with."""
    salted = tf.random.experimental.stateless_fold_in(seed, _STRONG_SALT)
    ops_seed, cutout_seed = tf.unstack(tf.random.experimental.stateless_split(salted, num=2))
    return ops_seed, cutout_seed


def sample_ops(seed: IntTensor, policy: str = PAPER) -> tuple[IntTensor, FloatTensor]:
    """Draws the ops of one image and their magnitudes.

    Args:
      seed: int [2], stateless seed.
      policy: "paper" or "light".

    Returns:
      (indices into ``POLICY_OPS[policy]``, int32 [NUM_OPS], uniform and
      independent; magnitudes, float32 [NUM_OPS], each uniform in its op's
      range, whole numbers for an integer op).
    """
    check_policy(policy, CROP_AREA_RANGE[0])
    ops = POLICY_OPS[policy]
    choice_seed, magnitude_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    indices = tf.random.stateless_uniform([NUM_OPS], choice_seed, 0, len(ops), dtype=tf.int32)
    draws = tf.random.stateless_uniform([NUM_OPS], magnitude_seed)
    low = tf.gather(tf.constant([op.low for op in ops], tf.float32), indices)
    span = tf.gather(tf.constant([op.high - op.low for op in ops], tf.float32), indices)
    integer = tf.gather(tf.constant([op.integer for op in ops]), indices)
    # The minimum: float32 rounding could lift low + draw * (span + 1) to high + 1.
    whole = tf.minimum(tf.floor(low + draws * (span + 1.0)), low + span)
    magnitudes = tf.where(integer, whole, low + draws * span)
    return indices, magnitudes


def apply_op(image: FloatTensor, index: IntTensor, magnitude: FloatTensor,
             policy: str = PAPER) -> FloatTensor:
    """Applies op ``POLICY_OPS[policy][index]`` (int32 []) with ``magnitude``
    (float32 []) to float32 [H, W, 3] in [0, 1]; returns the same."""
    branches = [lambda function=OP_FUNCTIONS[op.name]: function(image, magnitude)
                for op in POLICY_OPS[policy]]
    return tf.switch_case(index, branches)


def cutout_window(image_shape: IntTensor, seed: IntTensor,
                  max_fraction: float) -> tuple[IntTensor, IntTensor, IntTensor]:
    """Draws Cutout's square.

    Args:
      image_shape: int [3] (or [2]), the image's height and width first.
      seed: int [2], stateless seed.
      max_fraction: the largest side, a fraction of min(H, W).

    Returns:
      (top, left, side), int32 scalars: the square's rows top..top+side-1
      and columns left..left+side-1, which may reach outside the image.
      side = round(L * min(H, W)) with L uniform in [0, max_fraction); the
      centre pixel (top + side // 2, left + side // 2) is uniform over the image.
    """
    size_seed, centre_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    height_width = tf.cast(image_shape[:2], tf.float32)
    short_side = tf.reduce_min(height_width)
    fraction = tf.random.stateless_uniform([], size_seed, 0.0, max_fraction)
    side = tf.cast(tf.round(fraction * short_side), tf.int32)
    centre = tf.cast(tf.floor(tf.random.stateless_uniform([2], centre_seed) * height_width),
                     tf.int32)
    return centre[0] - side // 2, centre[1] - side // 2, side


def cutout(image: FloatTensor, seed: IntTensor, max_fraction: float) -> FloatTensor:
    """Sets the pixels of the `cutout_window` square to ``FILL``.
    float32 [H, W, 3] in [0, 1] -> same."""
    return grey_squares(image, tf.stack(cutout_window(tf.shape(image), seed, max_fraction)))


def grey_squares(image: FloatTensor, square: IntTensor) -> FloatTensor:
    """float32 [..., H, W, 3] -> same, the pixels of each image's ``square``
    (int32 [..., 3]: top, left, side, as `cutout_window` draws it) set to ``FILL``."""
    shape = tf.shape(image)
    top, left, side = tf.unstack(square, axis=-1)
    rows, columns = tf.range(shape[-3]), tf.range(shape[-2])
    in_rows = (rows >= top[..., None]) & (rows < (top + side)[..., None])
    in_columns = (columns >= left[..., None]) & (columns < (left + side)[..., None])
    inside = in_rows[..., :, None, None] & in_columns[..., None, :, None]
    return tf.where(inside, FILL, image)


def strong_augment(image: IntTensor | FloatTensor, seed: IntTensor,
                   policy: str = PAPER) -> FloatTensor:
    """The strong view: ``NUM_OPS`` ops of `sample_ops`, then `cutout`.

    Args:
      image: float32 [H, W, 3] in [0, 1], or uint8 [H, W, 3].
      seed: int32/int64 [2], this example's stateless seed.
      policy: "paper" (FixMatch's RandAugment) or "light" (for digits).

    Returns:
      float32 [H, W, 3] in [0, 1].
    """
    check_policy(policy, CROP_AREA_RANGE[0])
    image = tf.convert_to_tensor(image)
    if image.dtype == tf.uint8:
        image = tf.cast(image, tf.float32) / 255.0
    return apply_strong_params(image, draw_strong_params(seed, tf.shape(image), policy), policy)


def draw_strong_params(seed: IntTensor, image_shape: IntTensor,
                       policy: str = PAPER) -> dict[str, Tensor]:
    """`strong_augment`'s random choices for an image of ``image_shape`` (int
    [3] or [2], height and width first), drawn from the example's ``seed`` (int
    [2]) as it draws them: {"ops": int32 [NUM_OPS] and "magnitudes": float32
    [NUM_OPS] (`sample_ops`), "cutout": int32 [3], the square's top, left and
    side (`cutout_window`)}. Any batch of them (each with a leading axis [B])
    is what `llp_tf.data.augmentation.rand_augment_device` applies."""
    check_policy(policy, CROP_AREA_RANGE[0])
    ops_seed, cutout_seed = strong_seeds(seed)
    indices, magnitudes = sample_ops(ops_seed, policy)
    square = cutout_window(image_shape, cutout_seed, CUTOUT_MAX_FRACTION[policy])
    return {"ops": indices, "magnitudes": magnitudes, "cutout": tf.stack(square)}


def apply_strong_params(image: FloatTensor, params: dict[str, Tensor],
                        policy: str = PAPER) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same: the ops and Cutout of ``params``
    (`draw_strong_params`) of ``policy``."""
    static_shape = image.shape
    for step in range(NUM_OPS):
        image = apply_op(image, params["ops"][step], params["magnitudes"][step], policy)
    image = grey_squares(image, params["cutout"])
    image.set_shape(static_shape)
    return image
