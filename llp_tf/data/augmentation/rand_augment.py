"""Strong augmentation: RandAugment as FixMatch used it (random magnitudes), then Cutout.

Pure functions of one image and a stateless ``seed`` (int32/int64 [2]), drawn from a stream
of their own (`strong_seeds`). As FixMatch (Sohn et al. 2020) says: ``NUM_OPS`` = 2 ops drawn
uniformly, with replacement, from the policy's list, each at a magnitude uniform in its range,
then a grey Cutout square. "paper" is FixMatch's Table 12, "light" the digits' policy
(docs/augmentation.md, "RandAugment's ops and magnitudes", also where FixMatch's code departs
from it). Images come in as float32 [H, W, 3] in [0, 1] (uint8 is scaled by 1/255), after
the crop and flip and before `weak.normalize`, and leave the same."""

import math
from typing import NamedTuple

import tensorflow as tf

from llp_tf.data.augmentation.weak import (
    CROP_AREA_RANGE, adjust_brightness, adjust_contrast, adjust_saturation, check_policy)
from llp_tf.data.config import LIGHT, PAPER
from llp_tf.tensor_types import FloatTensor, IntTensor, Tensor

NUM_OPS = 2
FILL = 0.5
INTERPOLATION = "NEAREST"

_STRONG_SALT = 0x5752


class OpRange(NamedTuple):
    """An op and its magnitude range: uniform over the integers low..high (``integer``), else in
    [low, high)."""

    name: str
    low: float = 0.0
    high: float = 0.0
    integer: bool = False


_PHOTOMETRIC = (OpRange("auto_contrast"), OpRange("brightness", 0.05, 0.95),
                OpRange("contrast", 0.05, 0.95), OpRange("equalize"), OpRange("identity"),
                OpRange("posterize", 4, 8, integer=True), OpRange("sharpness", 0.05, 0.95))

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
    """float32 level / 255 of int32 levels 0..255, looked up: under Grappler a division by 255
    becomes a multiplication, off by one bit for half the levels."""
    return tf.gather(tf.constant([level / 255.0 for level in range(256)], tf.float32), levels)


def auto_contrast(image: FloatTensor) -> FloatTensor:
    """float32 [..., H, W, 3] in [0, 1] -> same, each channel stretched to [0, 1] (PIL's
    autocontrast without its 8-bit rounding); a constant channel is kept."""
    low = tf.reduce_min(image, axis=[-3, -2], keepdims=True)
    span = tf.reduce_max(image, axis=[-3, -2], keepdims=True) - low
    stretched = (image - low) / tf.where(span > 0.0, span, 1.0)
    return tf.where(span > 0.0, stretched, image)


def equalize(image: FloatTensor) -> FloatTensor:
    """float32 [..., H, W, 3] in [0, 1] -> same: PIL's histogram equalisation of each channel's
    8-bit levels (a channel with ``step == 0`` is kept), quantised to 8-bit levels."""
    shape = tf.shape(image)
    levels = tf.reshape(_levels(image), tf.concat([[-1], shape[-3:]], 0))
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
    """float32 [..., H, W, 3] in [0, 1] -> same, each 8-bit level keeping its ``bits`` (1..8,
    broadcast) highest bits."""
    shift = 8 - tf.cast(bits, tf.int32)
    kept = tf.bitwise.left_shift(tf.bitwise.right_shift(_levels(image), shift), shift)
    return _from_levels(kept)


def solarize(image: FloatTensor, threshold: float | FloatTensor) -> FloatTensor:
    """float32 [..., H, W, 3] in [0, 1] -> same, x -> 1 - x where 255 x >= 256 ``threshold``
    (PIL's solarize at 256 T): T = 0 inverts everything, T = 1 nothing."""
    return tf.where(image * 255.0 >= 256.0 * threshold, 1.0 - image, image)


_SMOOTH_KERNEL = ((1.0, 1.0, 1.0), (1.0, 5.0, 1.0), (1.0, 1.0, 1.0))


def sharpness(image: FloatTensor, factor: float | FloatTensor) -> FloatTensor:
    """float32 [..., H, W, 3] in [0, 1], H, W >= 3 -> same: PIL's sharpness, a blend with the 3x3
    SMOOTH filtering (border kept); ``factor`` 1 is the image, 0 the smoothed one."""
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


GEOMETRIC = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")


def affine_coefficients(name: str, magnitude: float | FloatTensor, height: FloatTensor,
                        width: FloatTensor) -> tuple[FloatTensor, ...]:
    """(a, b, c, d, shift_x, shift_y), float32 of ``magnitude``'s shape: the map of geometric
    op ``name`` on images of ``height`` x ``width`` (float32), for `projective_transform`."""
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
    """float32 [..., 8], ImageProjectiveTransformV3's transforms of `affine_coefficients` (each
    [...]): output pixel p takes the input at ((a, b), (c, d)) @ (p - centre) + centre - shift,
    in (x, y) pixels, the centre ((W - 1) / 2, (H - 1) / 2)."""
    a, b, c, d, shift_x, shift_y = coefficients
    centre_x = (width - 1.0) / 2.0
    centre_y = (height - 1.0) / 2.0
    zero = tf.zeros_like(a)
    return tf.stack([a, b, centre_x - a * centre_x - b * centre_y - shift_x,
                     c, d, centre_y - c * centre_x - d * centre_y - shift_y, zero, zero], axis=-1)


def warp(images: FloatTensor, transforms: FloatTensor) -> FloatTensor:
    """float32 [B, H, W, 3] -> same, each image sampled through its `projective_transform`
    (float32 [B, 8]) by nearest neighbour, ``FILL`` outside."""
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
    """Moves the content of [H, W, 3] right by ``fraction`` of its width."""
    return _affine(image, "translate_x", fraction)


def translate_y(image: FloatTensor, fraction: float | FloatTensor) -> FloatTensor:
    """Moves the content of [H, W, 3] down by ``fraction`` of its height."""
    return _affine(image, "translate_y", fraction)


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
    """(ops seed, cutout seed), int [2] each: `strong_augment`'s sub-seeds of ``seed``."""
    salted = tf.random.experimental.stateless_fold_in(seed, _STRONG_SALT)
    ops_seed, cutout_seed = tf.unstack(tf.random.experimental.stateless_split(salted, num=2))
    return ops_seed, cutout_seed


def sample_ops(seed: IntTensor, policy: str = PAPER) -> tuple[IntTensor, FloatTensor]:
    """(int32 [NUM_OPS] indices into ``POLICY_OPS[policy]``, float32 [NUM_OPS] magnitudes, each
    uniform in its op's range), drawn from ``seed`` (int [2])."""
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
    """float32 [H, W, 3] in [0, 1] -> same: op ``POLICY_OPS[policy][index]`` (int32 []) at
    ``magnitude`` (float32 [])."""
    branches = [lambda function=OP_FUNCTIONS[op.name]: function(image, magnitude)
                for op in POLICY_OPS[policy]]
    return tf.switch_case(index, branches)


def cutout_window(image_shape: IntTensor, seed: IntTensor,
                  max_fraction: float) -> tuple[IntTensor, IntTensor, IntTensor]:
    """(top, left, side), int32 scalars: Cutout's square, possibly reaching outside the image, in
    an image of ``image_shape`` (int [3] or [2], height first). side = round(L * min(H, W)), L
    uniform in [0, max_fraction); its centre (top + side // 2, left + side // 2) is uniform."""
    size_seed, centre_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    height_width = tf.cast(image_shape[:2], tf.float32)
    short_side = tf.reduce_min(height_width)
    fraction = tf.random.stateless_uniform([], size_seed, 0.0, max_fraction)
    side = tf.cast(tf.round(fraction * short_side), tf.int32)
    centre = tf.cast(tf.floor(tf.random.stateless_uniform([2], centre_seed) * height_width),
                     tf.int32)
    return centre[0] - side // 2, centre[1] - side // 2, side


def cutout(image: FloatTensor, seed: IntTensor, max_fraction: float) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same, the `cutout_window` square set to ``FILL``."""
    return grey_squares(image, tf.stack(cutout_window(tf.shape(image), seed, max_fraction)))


def grey_squares(image: FloatTensor, square: IntTensor) -> FloatTensor:
    """float32 [..., H, W, 3] -> same, each image's ``square`` (int32 [..., 3]: top, left, side,
    as `cutout_window` draws it) set to ``FILL``."""
    shape = tf.shape(image)
    top, left, side = tf.unstack(square, axis=-1)
    rows, columns = tf.range(shape[-3]), tf.range(shape[-2])
    in_rows = (rows >= top[..., None]) & (rows < (top + side)[..., None])
    in_columns = (columns >= left[..., None]) & (columns < (left + side)[..., None])
    inside = in_rows[..., :, None, None] & in_columns[..., None, :, None]
    return tf.where(inside, FILL, image)


def strong_augment(image: IntTensor | FloatTensor, seed: IntTensor,
                   policy: str = PAPER) -> FloatTensor:
    """The strong view: float32 [H, W, 3] in [0, 1] (or uint8) -> float32 [H, W, 3] in [0, 1].

    ``seed``: int32/int64 [2], the example's; ``policy``: "paper" (FixMatch's RandAugment) or
    "light" (for digits)."""
    check_policy(policy, CROP_AREA_RANGE[0])
    image = tf.convert_to_tensor(image)
    if image.dtype == tf.uint8:
        image = tf.cast(image, tf.float32) / 255.0
    return apply_strong_params(image, draw_strong_params(seed, tf.shape(image), policy), policy)


def draw_strong_params(seed: IntTensor, image_shape: IntTensor,
                       policy: str = PAPER) -> dict[str, Tensor]:
    """`strong_augment`'s choices for an image of ``image_shape`` (int [3] or [2]) from ``seed``:
    {"ops": int32 [NUM_OPS], "magnitudes": float32 [NUM_OPS], "cutout": int32 [3] (top, left,
    side)}; batched ([B] leading), what `rand_augment_device` applies."""
    check_policy(policy, CROP_AREA_RANGE[0])
    ops_seed, cutout_seed = strong_seeds(seed)
    indices, magnitudes = sample_ops(ops_seed, policy)
    square = cutout_window(image_shape, cutout_seed, CUTOUT_MAX_FRACTION[policy])
    return {"ops": indices, "magnitudes": magnitudes, "cutout": tf.stack(square)}


def apply_strong_params(image: FloatTensor, params: dict[str, Tensor],
                        policy: str = PAPER) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same: the ops and Cutout of ``params``
    (`draw_strong_params`)."""
    static_shape = image.shape
    for step in range(NUM_OPS):
        image = apply_op(image, params["ops"][step], params["magnitudes"][step], policy)
    image = grey_squares(image, params["cutout"])
    image.set_shape(static_shape)
    return image
