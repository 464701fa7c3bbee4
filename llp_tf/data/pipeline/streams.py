"""A training input of named streams, what a method reads per step: each `Stream` is read as
`input_fns.make_train_input_fn` reads, with a seed of its own (`stream_seed`), and the streams
are zipped into one element per step (docs/data.md, "Input streams and views")."""

import dataclasses
import zlib
from collections.abc import Collection, Mapping

import numpy as np
import tensorflow as tf

from llp_tf.data.augmentation import views as views_lib
from llp_tf.data.config import HOST, MIN_CROP_AREA, PAPER
from llp_tf.data.pipeline import input_fns
from llp_tf.data.pipeline.epoch_order import DEFAULT_CYCLE_LENGTH
from llp_tf.data.sources.base import Source
from llp_tf.errors import ConfigError
from llp_tf.tensor_types import Array

# A salted seed is the run's seed plus a multiple of this: it meets no run seed below it.
_SALT_UNIT = 2 ** 32
_SALTS = 2 ** 30


@dataclasses.dataclass(frozen=True)
class Stream:
    """One stream of a method's input: ``index`` (int64 [N_s], sorted dataset indices),
    ``batch_size`` per global step (split over the replicas), ``views`` (element key -> "weak"
    or "strong", view 0 with the example's own seed) and ``repeats`` (passes run into each
    other, for a set smaller than a batch; never with a memory bank)."""

    index: np.ndarray
    batch_size: int
    views: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: dict(views_lib.ONE_VIEW))
    repeats: bool = False


def stream_seed(seed: int, name: str, first: bool) -> int:
    """int: the seed stream ``name`` reads with, ``seed`` for the ``first`` stream."""
    if first:
        return int(seed)
    return int(seed) + _SALT_UNIT * (1 + zlib.crc32(name.encode()) % _SALTS)


def check_batch_split(streams: Mapping[str, Stream], replicas: int) -> None:
    """ConfigError unless every stream's batch size splits evenly over ``replicas``."""
    for name, stream in streams.items():
        if stream.batch_size % replicas:
            raise ConfigError(
                f"The batch size {stream.batch_size} of the input stream {name!r} does not "
                f"split evenly over {replicas} replicas; choose batch sizes that are "
                f"multiples of {replicas}.")


def make_streams_input_fn(source: Source, streams: Mapping[str, Stream], image_size: int,
                          seed: int, epoch: int, start_step: int, steps: int, *,
                          labelled_index: Array, augmentation: str = PAPER,
                          min_crop_area: float = MIN_CROP_AREA, cached: Collection[str] = (),
                          fused_crop: bool = True, input_service: str = "",
                          cycle_length: int = DEFAULT_CYCLE_LENGTH,
                          shuffle_block: int | None = None,
                          augment_on: str = HOST) -> input_fns.InputFn:
    """``input_fn(input_context or None)`` of one training epoch of ``streams`` (name ->
    `Stream`, the first read with ``seed``): ``steps - start_step`` elements per replica,
    {stream name: `input_fns.make_train_input_fn`'s element}. ``cached`` names the streams held
    in memory; the other settings are `input_fns.make_train_input_fn`'s. ConfigError for no
    stream, or naming the stream whose settings are wrong."""
    if not streams:
        raise ConfigError("A training input needs at least one stream.")
    stream_fns = {}
    for position, (name, stream) in enumerate(streams.items()):
        try:
            stream_fns[name] = input_fns.make_train_input_fn(
                source, stream.batch_size, image_size, stream_seed(seed, name, position == 0),
                epoch, start_step=start_step, used_index=stream.index, steps=steps,
                cycle_length=cycle_length, shuffle_block=shuffle_block,
                batches_cross_passes=stream.repeats, augmentation=augmentation,
                cache_passes=name in cached, min_crop_area=min_crop_area,
                fused_crop=fused_crop, input_service=input_service,
                labelled_index=labelled_index, views=stream.views, augment_on=augment_on)
        except ConfigError as error:
            raise ConfigError(f"Input stream {name!r}: {error}") from None

    def input_fn(input_context=None):
        check_batch_split(streams, 1 if input_context is None
                          else input_context.num_replicas_in_sync)
        return tf.data.Dataset.zip({name: make(input_context)
                                    for name, make in stream_fns.items()})

    return input_fn


def finish_batch(batch: dict, streams: Mapping[str, Stream], augmentation: str) -> dict:
    """A step's batch of device-side elements ({stream name: element}) with every stream's
    views finished here (`views.finish_views`): the batch the host path gives."""
    return {name: views_lib.finish_views(batch[name], stream.views, augmentation)
            for name, stream in streams.items()}
