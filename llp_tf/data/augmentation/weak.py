"""The weak augmentation: the authors' release's training augmentation, or its crop alone.

Pure functions of one image; every random choice is a stateless op on an explicit ``seed``
(int32/int64 [2]). "paper" is the release's torchvision-style recipe, in its order: random
resized crop, grayscale (p = 0.2), colour jitter in a random order, horizontal flip (p = 0.5),
ImageNet mean/std normalisation. Images come in as uint8 [H, W, 3] and leave as float32
[size, size, 3], normalised."""

import math

import tensorflow as tf

from llp_tf.data.config import AUGMENTATIONS, MIN_CROP_AREA, PAPER
from llp_tf.tensor_types import FloatTensor, IntTensor, Tensor

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

CROP_AREA_RANGE = (MIN_CROP_AREA, 1.0)
CROP_ASPECT_RANGE = (3.0 / 4.0, 4.0 / 3.0)
GRAYSCALE_PROBABILITY = 0.2
JITTER_FACTOR_RANGE = (0.6, 1.4)
HUE_MAX_DELTA = 0.4
FLIP_PROBABILITY = 0.5

_CROP_ATTEMPTS = 10

_SEED_CROP, _SEED_GRAY, _SEED_JITTER, _SEED_FLIP = range(4)
_NUM_SUBSEEDS = 4


LUMA_WEIGHTS = (0.299, 0.587, 0.114)


def grayscale_luma(image: FloatTensor) -> FloatTensor:
    """float32 [..., H, W, 3] -> [..., H, W, 1]: ITU-R 601 luma, as PIL's 'L' conversion."""
    return tf.linalg.matvec(image, tf.constant(LUMA_WEIGHTS, tf.float32))[..., None]


def mean_luma(image: FloatTensor) -> FloatTensor:
    """float32 [..., H, W, 3] -> float32 [...]: each image's mean luma."""
    return tf.tensordot(tf.reduce_mean(image, axis=[-3, -2]),
                        tf.constant(LUMA_WEIGHTS, tf.float32), 1)


def crop_window(image_shape: IntTensor, seed: IntTensor,
                area_range: tuple[float, float] = CROP_AREA_RANGE,
                aspect_range: tuple[float, float] = CROP_ASPECT_RANGE,
                ) -> tuple[IntTensor, IntTensor, IntTensor, IntTensor]:
    """(top, left, height, width), int32 scalars: a random resized crop's box in an image of
    ``image_shape`` (int [3] or [2], height first), drawn from ``seed`` (int [2]).

    As torchvision's RandomResizedCrop in the release: ten boxes of area fraction uniform in
    ``area_range`` and log-uniform aspect ratio (width / height) in ``aspect_range``, the first
    that fits at a uniform position; if none fits, a centred box with the ratio clipped."""
    height = tf.cast(image_shape[0], tf.float32)
    width = tf.cast(image_shape[1], tf.float32)
    area_seed, aspect_seed, position_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, num=3))
    area = height * width * tf.random.stateless_uniform(
        [_CROP_ATTEMPTS], area_seed, area_range[0], area_range[1])
    log_aspect = tf.random.stateless_uniform(
        [_CROP_ATTEMPTS], aspect_seed, math.log(aspect_range[0]), math.log(aspect_range[1]))
    aspect = tf.exp(log_aspect)
    box_w = tf.round(tf.sqrt(area * aspect))
    box_h = tf.round(tf.sqrt(area / aspect))
    fits = (box_w >= 1.0) & (box_h >= 1.0) & (box_w <= width) & (box_h <= height)
    first_fit = tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32)
    any_fit = tf.reduce_any(fits)

    ratio = width / height
    fallback_w = tf.where(ratio < aspect_range[0], width,
                          tf.where(ratio > aspect_range[1],
                                   tf.round(height * aspect_range[1]), width))
    fallback_h = tf.where(ratio < aspect_range[0], tf.round(width / aspect_range[0]),
                          height)
    crop_w = tf.where(any_fit, tf.gather(box_w, first_fit), fallback_w)
    crop_h = tf.where(any_fit, tf.gather(box_h, first_fit), fallback_h)
    crop_w = tf.clip_by_value(crop_w, 1.0, width)
    crop_h = tf.clip_by_value(crop_h, 1.0, height)

    position = tf.random.stateless_uniform([2], position_seed, 0.0, 1.0)
    random_top = tf.floor(position[0] * (height - crop_h + 1.0))
    random_left = tf.floor(position[1] * (width - crop_w + 1.0))
    top = tf.where(any_fit, random_top, tf.floor((height - crop_h) / 2.0))
    left = tf.where(any_fit, random_left, tf.floor((width - crop_w) / 2.0))
    # u < 1, so only float rounding could reach past the border.
    top = tf.clip_by_value(top, 0.0, height - crop_h)
    left = tf.clip_by_value(left, 0.0, width - crop_w)
    return (tf.cast(top, tf.int32), tf.cast(left, tf.int32),
            tf.cast(crop_h, tf.int32), tf.cast(crop_w, tf.int32))


def _resample_outer(image: Tensor, size: int) -> FloatTensor:
    """uint8 or float32 [n, m] -> float32 [size, m]: axis 0 resampled, antialiased bilinear."""
    n, m = tf.shape(image)[0], tf.shape(image)[1]
    scale = tf.stack([1.0, tf.cast(size, tf.float32) / tf.cast(n, tf.float32)])
    resampled = tf.raw_ops.ScaleAndTranslate(
        images=tf.reshape(image, [1, 1, n, m]), size=tf.stack([1, size]), scale=scale,
        translation=tf.zeros([2]), kernel_type="triangle", antialias=True)
    return tf.reshape(resampled, [size, m])


def resize_crop(crop: IntTensor, size: int) -> IntTensor:
    """uint8 [h, w, 3] -> uint8 [size, size, 3]: antialiased bilinear, rounded to 8-bit levels
    as PIL's resize in the release; the floats of ``tf.image.resize(..., antialias=True)``."""
    width = tf.shape(crop)[1]
    rows = _resample_outer(tf.reshape(crop, [-1, width * 3]), size)
    columns = _resample_outer(tf.reshape(tf.transpose(rows), [width, 3 * size]), size)
    resized = tf.reshape(tf.transpose(tf.reshape(columns, [size * 3, size])), [size, size, 3])
    return tf.cast(tf.round(resized), tf.uint8)


def to_unit(image: IntTensor) -> FloatTensor:
    """uint8 [..., 3] -> float32 [..., 3] in [0, 1]."""
    return tf.cast(image, tf.float32) * (1.0 / 255.0)


def random_resized_crop(image: IntTensor, seed: IntTensor, size: int,
                        area_range: tuple[float, float] = CROP_AREA_RANGE,
                        aspect_range: tuple[float, float] = CROP_ASPECT_RANGE) -> FloatTensor:
    """uint8 [H, W, 3] -> float32 [size, size, 3] in [0, 1] on 8-bit levels: `crop_window`,
    then `resize_crop`."""
    top, left, crop_h, crop_w = crop_window(tf.shape(image), seed, area_range, aspect_range)
    return to_unit(resize_crop(tf.image.crop_to_bounding_box(image, top, left, crop_h, crop_w),
                               size))


def random_grayscale(image: FloatTensor, seed: IntTensor,
                     probability: float = GRAYSCALE_PROBABILITY) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same, replaced by its luma with ``probability``."""
    return _grayscale_if(image, tf.random.stateless_uniform([], seed) < probability)


def _grayscale_if(image, chosen):
    return tf.cond(chosen, lambda: tf.tile(grayscale_luma(image), [1, 1, 3]), lambda: image)


def adjust_brightness(image: FloatTensor, factor: float | FloatTensor) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same, times ``factor`` (torchvision's brightness)."""
    return tf.clip_by_value(image * factor, 0.0, 1.0)


def adjust_contrast(image: FloatTensor, factor: float | FloatTensor) -> FloatTensor:
    """float32 [..., H, W, 3] in [0, 1] -> same, blended with each image's mean luma
    (torchvision's contrast); ``factor`` a scalar or [..., 1, 1, 1]."""
    mean = mean_luma(image)[..., None, None, None]
    return tf.clip_by_value(mean + factor * (image - mean), 0.0, 1.0)


def adjust_saturation(image: FloatTensor, factor: float | FloatTensor) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same, blended with its luma (torchvision's saturation)."""
    gray = grayscale_luma(image)
    return tf.clip_by_value(gray + factor * (image - gray), 0.0, 1.0)


def adjust_hue(image: FloatTensor, delta: float | FloatTensor) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same, hue turned by ``delta`` (of the circle)."""
    return tf.clip_by_value(tf.image.adjust_hue(image, delta), 0.0, 1.0)


def color_jitter(image: FloatTensor, seed: IntTensor,
                 factor_range: tuple[float, float] = JITTER_FACTOR_RANGE,
                 hue_max_delta: float = HUE_MAX_DELTA) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same: brightness, contrast, saturation and hue jitter in a
    random order."""
    return jitter_with(image, **_jitter_draws(seed, factor_range, hue_max_delta))


def _jitter_draws(seed, factor_range=JITTER_FACTOR_RANGE, hue_max_delta=HUE_MAX_DELTA):
    """`jitter_with`'s {"factors", "hue", "order"}, drawn from ``seed``."""
    factor_seed, hue_seed, order_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, num=3))
    return {"factors": tf.random.stateless_uniform([3], factor_seed, *factor_range),
            "hue": tf.random.stateless_uniform([], hue_seed, -hue_max_delta, hue_max_delta),
            "order": tf.argsort(tf.random.stateless_uniform([4], order_seed))}


def jitter_with(image: FloatTensor, factors: FloatTensor, hue: FloatTensor,
                order: IntTensor) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same: brightness, contrast, saturation (``factors``, float32
    [3]) and ``hue`` (float32 []) applied in ``order`` (int32 [4], a permutation of 0-3)."""
    for step in range(4):
        image = tf.switch_case(order[step], [
            lambda image=image: adjust_brightness(image, factors[0]),
            lambda image=image: adjust_contrast(image, factors[1]),
            lambda image=image: adjust_saturation(image, factors[2]),
            lambda image=image: adjust_hue(image, hue),
        ])
    return image


def random_flip(image: FloatTensor, seed: IntTensor,
                probability: float = FLIP_PROBABILITY) -> FloatTensor:
    """Mirrors [H, W, C] left-right with the given probability."""
    return _flip_if(image, tf.random.stateless_uniform([], seed) < probability)


def _flip_if(image, chosen):
    return tf.cond(chosen, lambda: tf.reverse(image, axis=[1]), lambda: image)


def normalize(image: FloatTensor) -> FloatTensor:
    """float32 [..., 3] in [0, 1] -> ImageNet mean/std normalised."""
    std = tf.constant(IMAGENET_STD, tf.float32)
    mean = tf.constant(IMAGENET_MEAN, tf.float32)
    return image * (1.0 / std) - mean / std


def check_policy(policy: str, min_crop_area: float) -> None:
    """ValueError unless ``policy`` and ``min_crop_area`` are valid settings."""
    if policy not in AUGMENTATIONS:
        raise ValueError(f"Unknown augmentation policy {policy!r}; choose one of "
                         f"{AUGMENTATIONS}.")
    if not 0.0 < min_crop_area <= 1.0:
        raise ValueError(f"min_crop_area must lie in (0, 1]; got {min_crop_area}.")


def crop_seed(seed: IntTensor) -> IntTensor:
    """int [2]: the sub-seed of an example's ``seed`` that `train_augment` draws its crop with."""
    return tf.random.experimental.stateless_split(seed, num=_NUM_SUBSEEDS)[_SEED_CROP]


def train_augment(image: IntTensor, seed: IntTensor, size: int, policy: str = PAPER,
                  min_crop_area: float = CROP_AREA_RANGE[0]) -> FloatTensor:
    """The training augmentation: uint8 [H, W, 3] -> float32 [size, size, 3], normalised.

    ``seed``: int32/int64 [2], the example's; ``policy``: "paper" (the release's recipe) or
    "light" (its crop alone); ``min_crop_area`` in (0, 1]."""
    check_policy(policy, min_crop_area)
    top, left, height, width = crop_window(tf.shape(image), crop_seed(seed),
                                           (float(min_crop_area), 1.0))
    crop = tf.image.crop_to_bounding_box(image, top, left, height, width)
    return train_augment_crop(crop, seed, size, policy)


def train_augment_crop(crop: IntTensor, seed: IntTensor, size: int,
                       policy: str = PAPER) -> FloatTensor:
    """`train_augment` after its crop: ``crop`` (uint8 [h, w, 3]) is the window `crop_window`
    draws with ``crop_seed(seed)``, e.g. decoded alone (`llp_tf.data.decoding.crop_decode`)."""
    image = normalize(train_augment_crop_unnormalised(crop, seed, size, policy))
    image.set_shape([size, size, 3])
    return image


def train_augment_crop_unnormalised(crop: IntTensor, seed: IntTensor, size: int,
                                    policy: str = PAPER) -> FloatTensor:
    """`train_augment_crop` before `normalize`: float32 [S, S, 3] in [0, 1], the input of
    `llp_tf.data.augmentation.rand_augment.strong_augment`."""
    check_policy(policy, CROP_AREA_RANGE[0])
    image = apply_pixel_params(to_unit(resize_crop(crop, size)), draw_pixel_params(seed),
                               policy)
    image.set_shape([size, size, 3])
    return image


def draw_pixel_params(seed: IntTensor) -> dict[str, Tensor]:
    """The "paper" recipe's choices after its crop, from an example's ``seed`` (int [2]):
    {"grayscale": bool [], "factors": float32 [3], "hue": float32 [], "order": int32 [4],
    "flip": bool []}; batched ([B] leading), what `weak_device` applies."""
    seeds = tf.unstack(tf.random.experimental.stateless_split(seed, num=_NUM_SUBSEEDS))
    draw = tf.random.stateless_uniform
    return {"grayscale": draw([], seeds[_SEED_GRAY]) < GRAYSCALE_PROBABILITY,
            **_jitter_draws(seeds[_SEED_JITTER]),
            "flip": draw([], seeds[_SEED_FLIP]) < FLIP_PROBABILITY}


def apply_pixel_params(image: FloatTensor, params: dict[str, Tensor],
                       policy: str = PAPER) -> FloatTensor:
    """float32 [S, S, 3] in [0, 1], the resized crop -> same: ``policy``'s pixel work with the
    choices ``params`` (`draw_pixel_params`); "light" has none."""
    if policy != PAPER:
        return image
    image = _grayscale_if(image, params["grayscale"])
    image = jitter_with(image, params["factors"], params["hue"], params["order"])
    return _flip_if(image, params["flip"])
