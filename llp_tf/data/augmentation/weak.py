"""The weak augmentation: the release's training augmentation, or its crop alone.

Pure functions of one image. Every random choice is a stateless op driven by
an explicit ``seed`` (int32/int64 [2]; the input pipeline derives it from
``(run seed, epoch, example index)``), so an image's augmentation does not
depend on tf.data's parallelism, the number of replicas or where a resumed
epoch starts.

Train, the release's torchvision-style recipe in its order: random resized
crop (area 0.2-1, aspect ratio 3/4-4/3, log-uniform), random grayscale with
p = 0.2, colour jitter in a random order (brightness, contrast, saturation:
factor in [0.6, 1.4]; hue: shift in [-0.4, 0.4] of the hue circle),
horizontal flip with p = 0.5, ImageNet mean/std normalisation. The crop
is resized to uint8 levels (`resize_crop`, as PIL's resize in the release);
the random choices after it are drawn apart (`draw_pixel_params`) from
their application (`apply_pixel_params`), which
`llp_tf.data.augmentation.weak_device` also runs on a batch, on the
accelerator. The ``"light"`` policy keeps only the crop. The smallest crop
area is a setting of either policy. The evaluation transform, which
normalises the same way, is `eval_transform`.

Images come in as uint8 [H, W, 3] (grayscale already expanded to three
channels) and leave as float32 [size, size, 3], channel c in
``[(0 - MEAN[c]) / STD[c], (1 - MEAN[c]) / STD[c]]``.
"""

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

# torchvision's RandomResizedCrop tries ten boxes before falling back to a
# centre crop; the same here keeps the crop distribution of the release.
_CROP_ATTEMPTS = 10

# Sub-seeds of one example's seed, one per random decision.
_SEED_CROP, _SEED_GRAY, _SEED_JITTER, _SEED_FLIP = range(4)
_NUM_SUBSEEDS = 4


LUMA_WEIGHTS = (0.299, 0.587, 0.114)


def grayscale_luma(image: FloatTensor) -> FloatTensor:
    """float32 [..., H, W, 3] -> float32 [..., H, W, 1]: ITU-R 601 luma, as
    PIL's 'L' conversion."""
    # A matrix-vector product is several times faster than multiply + sum
    # over a last axis of 3.
    return tf.linalg.matvec(image, tf.constant(LUMA_WEIGHTS, tf.float32))[..., None]


def mean_luma(image: FloatTensor) -> FloatTensor:
    """float32 [..., H, W, 3] -> float32 [...]: each image's mean luma, from
    its channel means (cheaper)."""
    return tf.tensordot(tf.reduce_mean(image, axis=[-3, -2]),
                        tf.constant(LUMA_WEIGHTS, tf.float32), 1)


def crop_window(image_shape: IntTensor, seed: IntTensor,
                area_range: tuple[float, float] = CROP_AREA_RANGE,
                aspect_range: tuple[float, float] = CROP_ASPECT_RANGE,
                ) -> tuple[IntTensor, IntTensor, IntTensor, IntTensor]:
    """Samples the box of a random resized crop.

    Draws ``_CROP_ATTEMPTS`` candidate boxes with area fraction uniform in
    ``area_range`` and log-uniform aspect ratio (width / height) in
    ``aspect_range`` and takes the first that fits in the image, at a uniform
    position; if none fits, the largest centred box whose aspect ratio is
    clipped into ``aspect_range``.

    Args:
      image_shape: int [3] (or [2]), the image's height and width first.
      seed: int [2], stateless seed.
      area_range: (low, high) fractions of the image area.
      aspect_range: (low, high) width / height ratios.

    Returns:
      (top, left, height, width), int32 scalars, a box inside the image.
    """
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

    # Fallback: centre crop of the whole image with the ratio clipped.
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
    # floor(u * (n + 1)) can reach n + 1 - crop only for u == 1, which
    # stateless_uniform excludes; the clip guards float rounding.
    top = tf.clip_by_value(top, 0.0, height - crop_h)
    left = tf.clip_by_value(left, 0.0, width - crop_w)
    return (tf.cast(top, tf.int32), tf.cast(left, tf.int32),
            tf.cast(crop_h, tf.int32), tf.cast(crop_w, tf.int32))


def _resample_outer(image: Tensor, size: int) -> FloatTensor:
    """uint8 or float32 [n, m] -> float32 [size, m]: axis 0 resampled by
    TensorFlow's antialiased bilinear (triangle) kernel, each output row a
    weighted sum of whole input rows."""
    n, m = tf.shape(image)[0], tf.shape(image)[1]
    # As [1, 1, n, m]: ScaleAndTranslate's column pass, with m channels, is
    # its fast one (its row pass copies the one row).
    scale = tf.stack([1.0, tf.cast(size, tf.float32) / tf.cast(n, tf.float32)])
    resampled = tf.raw_ops.ScaleAndTranslate(
        images=tf.reshape(image, [1, 1, n, m]), size=tf.stack([1, size]), scale=scale,
        translation=tf.zeros([2]), kernel_type="triangle", antialias=True)
    return tf.reshape(resampled, [size, m])


def resize_crop(crop: IntTensor, size: int) -> IntTensor:
    """uint8 [h, w, 3] crop window -> uint8 [size, size, 3]: the second half of
    a random resized crop (antialiased bilinear, rounded to 8-bit levels, as
    PIL's resize in the release).

    The same pixels, bit for bit before the rounding, as
    ``tf.image.resize(crop, [size, size], "bilinear", antialias=True)``:
    both resample the rows, then the columns, with the same weights and
    sums. That op sums its column pass pixel by pixel, three channels at a
    time; here each pass resamples the outer axis of a matrix: the rows of
    [h, (w, 3)], then, after a 2-D transpose, those of [w, (3, size)]; a
    last 2-D transpose puts the axes back. Where ops share TensorFlow's
    intra-op pool that costs less CPU; on one thread, the same (docs/augmentation.md,
    "Where the augmentation runs")."""
    width = tf.shape(crop)[1]
    rows = _resample_outer(tf.reshape(crop, [-1, width * 3]), size)  # [size, (w, 3)]
    columns = _resample_outer(tf.reshape(tf.transpose(rows), [width, 3 * size]), size)
    resized = tf.reshape(tf.transpose(tf.reshape(columns, [size * 3, size])), [size, size, 3])
    # Weights >= 0 summing to 1: the levels stay in [0, 255], no clip needed.
    return tf.cast(tf.round(resized), tf.uint8)


def to_unit(image: IntTensor) -> FloatTensor:
    """uint8 [..., 3] -> float32 [..., 3] in [0, 1]."""
    return tf.cast(image, tf.float32) * (1.0 / 255.0)


def random_resized_crop(image: IntTensor, seed: IntTensor, size: int,
                        area_range: tuple[float, float] = CROP_AREA_RANGE,
                        aspect_range: tuple[float, float] = CROP_ASPECT_RANGE) -> FloatTensor:
    """Random resized crop (see `crop_window`) resized to ``size`` x ``size``.

    Args:
      image: uint8 [H, W, 3].
      seed: int [2].
      size: int, output side.

    Returns:
      float32 [size, size, 3] in [0, 1], on 8-bit levels (`resize_crop`).
    """
    top, left, crop_h, crop_w = crop_window(tf.shape(image), seed, area_range, aspect_range)
    # Crop before converting to float: only the window is touched.
    return to_unit(resize_crop(tf.image.crop_to_bounding_box(image, top, left, crop_h, crop_w),
                               size))


def random_grayscale(image: FloatTensor, seed: IntTensor,
                     probability: float = GRAYSCALE_PROBABILITY) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same, replaced by its luma (in all three
    channels) with the given probability."""
    return _grayscale_if(image, tf.random.stateless_uniform([], seed) < probability)


def _grayscale_if(image, chosen):
    return tf.cond(chosen, lambda: tf.tile(grayscale_luma(image), [1, 1, 3]), lambda: image)


def adjust_brightness(image: FloatTensor, factor: float | FloatTensor) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same, intensities multiplied by ``factor``
    (torchvision's brightness)."""
    return tf.clip_by_value(image * factor, 0.0, 1.0)


def adjust_contrast(image: FloatTensor, factor: float | FloatTensor) -> FloatTensor:
    """float32 [..., H, W, 3] in [0, 1] -> same, each image blended with its mean
    luma (torchvision's contrast); ``factor`` a scalar, or [..., 1, 1, 1]."""
    mean = mean_luma(image)[..., None, None, None]
    return tf.clip_by_value(mean + factor * (image - mean), 0.0, 1.0)


def adjust_saturation(image: FloatTensor, factor: float | FloatTensor) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same, blended with the image's own luma
    (torchvision's saturation)."""
    gray = grayscale_luma(image)
    return tf.clip_by_value(gray + factor * (image - gray), 0.0, 1.0)


def adjust_hue(image: FloatTensor, delta: float | FloatTensor) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same, hue rotated by ``delta`` of the full circle,
    delta in [-0.5, 0.5]."""
    return tf.clip_by_value(tf.image.adjust_hue(image, delta), 0.0, 1.0)


def color_jitter(image: FloatTensor, seed: IntTensor,
                 factor_range: tuple[float, float] = JITTER_FACTOR_RANGE,
                 hue_max_delta: float = HUE_MAX_DELTA) -> FloatTensor:
    """Brightness, contrast, saturation and hue jitter, applied in a random order.

    Args:
      image: float32 [H, W, 3] in [0, 1].
      seed: int [2].

    Returns:
      float32 [H, W, 3] in [0, 1].
    """
    return jitter_with(image, **_jitter_draws(seed, factor_range, hue_max_delta))


def _jitter_draws(seed, factor_range=JITTER_FACTOR_RANGE, hue_max_delta=HUE_MAX_DELTA):
    """`color_jitter`'s draws from ``seed``: {"factors": float32 [3] (brightness,
    contrast, saturation), "hue": float32 [], "order": int32 [4], a permutation
    of the four adjustments (0-3 in that order, hue last)}."""
    factor_seed, hue_seed, order_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, num=3))
    return {"factors": tf.random.stateless_uniform([3], factor_seed, *factor_range),
            "hue": tf.random.stateless_uniform([], hue_seed, -hue_max_delta, hue_max_delta),
            "order": tf.argsort(tf.random.stateless_uniform([4], order_seed))}


def jitter_with(image: FloatTensor, factors: FloatTensor, hue: FloatTensor,
                order: IntTensor) -> FloatTensor:
    """float32 [H, W, 3] in [0, 1] -> same: brightness, contrast, saturation
    (``factors``, float32 [3]) and ``hue`` (float32 []) adjusted in ``order``
    (int32 [4], a permutation of 0-3 in that order of adjustments)."""
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
    """int [2]: the sub-seed of an example's ``seed`` (int [2]) that
    `train_augment` draws the crop window with (`crop_window`)."""
    return tf.random.experimental.stateless_split(seed, num=_NUM_SUBSEEDS)[_SEED_CROP]


def train_augment(image: IntTensor, seed: IntTensor, size: int, policy: str = PAPER,
                  min_crop_area: float = CROP_AREA_RANGE[0]) -> FloatTensor:
    """The training augmentation.

    Args:
      image: uint8 [H, W, 3].
      seed: int32/int64 [2], this example's stateless seed.
      size: int, output side S.
      policy: "paper" (the release's recipe) or "light" (its random resized
        crop alone).
      min_crop_area: float in (0, 1], the smallest crop area fraction.

    Returns:
      float32 [S, S, 3], normalised.
    """
    check_policy(policy, min_crop_area)
    top, left, height, width = crop_window(tf.shape(image), crop_seed(seed),
                                           (float(min_crop_area), 1.0))
    crop = tf.image.crop_to_bounding_box(image, top, left, height, width)
    return train_augment_crop(crop, seed, size, policy)


def train_augment_crop(crop: IntTensor, seed: IntTensor, size: int,
                       policy: str = PAPER) -> FloatTensor:
    """The training augmentation after its crop window was cut out.

    ``train_augment(image, seed, ...)`` is this function applied to the
    window of ``image`` that `crop_window` draws with ``crop_seed(seed)``
    and area range ``(min_crop_area, 1)``; a caller that decodes only that
    window (`llp_tf.data.decoding.crop_decode`) passes it here.

    Args:
      crop: uint8 [h, w, 3], the crop window.
      seed: int32/int64 [2], this example's stateless seed (not the crop's).
      size: int, output side S.
      policy: "paper" or "light".

    Returns:
      float32 [S, S, 3], normalised.
    """
    image = normalize(train_augment_crop_unnormalised(crop, seed, size, policy))
    image.set_shape([size, size, 3])
    return image


def train_augment_crop_unnormalised(crop: IntTensor, seed: IntTensor, size: int,
                                    policy: str = PAPER) -> FloatTensor:
    """`train_augment_crop` before its `normalize`: float32 [S, S, 3] in [0, 1]
    (what `llp_tf.data.augmentation.rand_augment.strong_augment` takes)."""
    check_policy(policy, CROP_AREA_RANGE[0])
    image = apply_pixel_params(to_unit(resize_crop(crop, size)), draw_pixel_params(seed),
                               policy)
    image.set_shape([size, size, 3])
    return image


def draw_pixel_params(seed: IntTensor) -> dict[str, Tensor]:
    """The "paper" recipe's random choices after its crop, drawn from an
    example's ``seed`` (int [2]) as `train_augment` draws them: {"grayscale":
    bool [], "factors": float32 [3], "hue": float32 [], "order": int32 [4]
    (see `jitter_with`), "flip": bool []}. Any batch of them (each with a
    leading axis [B]) is what `llp_tf.data.augmentation.weak_device` applies."""
    seeds = tf.unstack(tf.random.experimental.stateless_split(seed, num=_NUM_SUBSEEDS))
    draw = tf.random.stateless_uniform
    return {"grayscale": draw([], seeds[_SEED_GRAY]) < GRAYSCALE_PROBABILITY,
            **_jitter_draws(seeds[_SEED_JITTER]),
            "flip": draw([], seeds[_SEED_FLIP]) < FLIP_PROBABILITY}


def apply_pixel_params(image: FloatTensor, params: dict[str, Tensor],
                       policy: str = PAPER) -> FloatTensor:
    """float32 [S, S, 3] in [0, 1], the resized crop -> same: the pixel work
    of ``policy`` with the choices ``params`` (`draw_pixel_params`); "light"
    has none."""
    if policy != PAPER:
        return image
    image = _grayscale_if(image, params["grayscale"])
    image = jitter_with(image, params["factors"], params["hue"], params["order"])
    return _flip_if(image, params["flip"])
