"""The views of a training example: several augmented images of one decode.

A view is "weak" (the run's augmentation, `weak.train_augment_crop`) or "strong" (the weak view
before normalising, then `rand_augment.strong_augment` with the run's policy, then
`weak.normalize`). View 0 has the example's seed, view v > 0 that seed with v folded in; each
draws its own crop window, and the union of the windows is decoded once (`load_views`). Views
leave as float32 [S, S, 3], normalised, or with ``augment_on="device"`` as uint8 [S, S, 3]
resized crops, their random choices under "augment" (`finish_views` applies them)."""

import types
from collections.abc import Mapping

import tensorflow as tf

from llp_tf.data.augmentation import rand_augment, rand_augment_device, weak, weak_device
from llp_tf.data.config import AUGMENT_ON, DEVICE, HOST
from llp_tf.data.sources.base import Record, Source
from llp_tf.errors import ConfigError
from llp_tf.tensor_types import FloatTensor, IntTensor

WEAK, STRONG = "weak", "strong"
VIEW_POLICIES = (WEAK, STRONG)
#: The views of an element with one image, today's training element.
ONE_VIEW = types.MappingProxyType({"image": WEAK})
#: Element keys a view cannot take.
RESERVED_KEYS = ("index", "label", "augment")


def check_views(views: Mapping[str, str]) -> dict[str, str]:
    """``views`` as a dict, in order; ConfigError unless one or more element keys (str, not in
    `RESERVED_KEYS`), each with a policy of `VIEW_POLICIES`."""
    if not isinstance(views, Mapping) or not views:
        raise ConfigError(f"views must map element keys to policies {VIEW_POLICIES}; got "
                          f"{views!r}.")
    for key, policy in views.items():
        if not isinstance(key, str) or key in RESERVED_KEYS:
            raise ConfigError(f"A view cannot be named {key!r}: an element's key other than "
                              f"{RESERVED_KEYS}.")
        if policy not in VIEW_POLICIES:
            raise ConfigError(f"Unknown view policy {policy!r} of view {key!r}; choose one of "
                              f"{VIEW_POLICIES}.")
    return dict(views)


def view_seeds(example_seed: IntTensor, count: int) -> list[IntTensor]:
    """int [2] seeds of an example's ``count`` views, from its ``example_seed`` (int [2])."""
    return [example_seed] + [tf.random.experimental.stateless_fold_in(example_seed, view)
                             for view in range(1, count)]


def view_windows(image_shape: IntTensor, seeds: list[IntTensor],
                 area_range: tuple[float, float]) -> IntTensor:
    """int32 [V, 4]: each view's crop window (top, left, height, width) in an image of
    ``image_shape`` (int [3], height first)."""
    return tf.stack([tf.stack(weak.crop_window(image_shape, weak.crop_seed(seed),
                                                  area_range)) for seed in seeds])


def _union(windows):
    """(top, left, height, width), int32 []: the smallest box holding all ``windows``."""
    top, left = tf.reduce_min(windows[:, 0]), tf.reduce_min(windows[:, 1])
    bottom = tf.reduce_max(windows[:, 0] + windows[:, 2])
    right = tf.reduce_max(windows[:, 1] + windows[:, 3])
    return top, left, bottom - top, right - left


def load_views(source: Source, record: Record, seeds: list[IntTensor],
               area_range: tuple[float, float], fused: bool) -> tuple[IntTensor, IntTensor]:
    """(box: uint8 [h, w, 3], the union of the views' windows of the record's image, decoded
    once (only that box of a JPEG if ``fused``); windows: int32 [V, 4], each view's window in
    it)."""
    drawn = {}  # load_crop calls the window function once, in this graph (crop_decode)

    def union_window(shape):
        drawn["windows"] = view_windows(shape, seeds, area_range)
        return _union(drawn["windows"])

    box = source.load_crop(record, union_window, fused)
    windows = drawn["windows"]
    offset = tf.stack([tf.reduce_min(windows[:, 0]), tf.reduce_min(windows[:, 1]), 0, 0])
    return box, windows - offset


def resize_views(box: IntTensor, windows: IntTensor, size: int) -> IntTensor:
    """uint8 [V, S, S, 3]: each of ``windows`` (int32 [V, 4]) cut from ``box`` (uint8 [h, w,
    3]) and resized (`weak.resize_crop`)."""
    def resized(window):
        top, left, height, width = tf.unstack(window)
        image = weak.resize_crop(box[top:top + height, left:left + width], size)
        image.set_shape([size, size, 3])
        return image

    return tf.stack([resized(window) for window in tf.unstack(windows, windows.shape[0])])


def augment_view(resized: IntTensor, seed: IntTensor, augmentation: str,
                 policy: str) -> FloatTensor:
    """uint8 [S, S, 3] resized crop -> float32 [S, S, 3], normalised: the view of ``policy``
    with the run's ``augmentation``."""
    weak.check_policy(augmentation, weak.CROP_AREA_RANGE[0])
    pixels = weak.apply_pixel_params(weak.to_unit(resized), weak.draw_pixel_params(seed),
                                     augmentation)
    if policy == STRONG:
        pixels = rand_augment.strong_augment(pixels, seed, augmentation)
    image = weak.normalize(pixels)
    image.set_shape(resized.shape)
    return image


def check_augment_on(augment_on: str) -> None:
    """ConfigError unless ``augment_on`` is one of `AUGMENT_ON`."""
    if augment_on not in AUGMENT_ON:
        raise ConfigError(f"augment_on must be one of {AUGMENT_ON}; got {augment_on!r}.")


def view_params(seed: IntTensor, size: int, augmentation: str, policy: str) -> dict:
    """A view's random choices for the device: `weak.draw_pixel_params`, and for a strong view
    `rand_augment.draw_strong_params` too."""
    params = weak.draw_pixel_params(seed)
    if policy == STRONG:
        params.update(rand_augment.draw_strong_params(seed, [size, size], augmentation))
    return params


def make_views(resized: IntTensor, seeds: list[IntTensor], size: int, augmentation: str,
               views: Mapping[str, str], augment_on: str = HOST) -> dict:
    """An example's views from their ``resized`` crops (uint8 [V, S, S, 3]) and ``seeds`` (in
    the order of ``views``): key -> float32 [S, S, 3], or with ``augment_on="device"`` key ->
    its uint8 crop, plus "augment": key -> its random choices."""
    images, params = {}, {}
    for (key, policy), image, seed in zip(views.items(), tf.unstack(resized, len(seeds)),
                                          seeds):
        if augment_on == DEVICE:
            images[key] = image
            params[key] = view_params(seed, size, augmentation, policy)
        else:
            images[key] = augment_view(image, seed, augmentation, policy)
    return {**images, "augment": params} if augment_on == DEVICE else images


def finish_views(element: dict, views: Mapping[str, str], augmentation: str) -> dict:
    """A batch of device-side elements (`make_views`, batched) -> the host path's: each view
    float32 [b, S, S, 3], normalised, without "augment"; an element without it is kept as is."""
    if "augment" not in element:
        return element
    element = dict(element)
    params = element.pop("augment")
    for key, policy in views.items():
        image = weak_device.augment_batch(element[key], params[key], augmentation)
        if policy == STRONG:
            image = rand_augment_device.strong_batch(image, params[key], augmentation)
        element[key] = weak.normalize(image)
    return element
