"""A training input of named streams: what a method reads per step.

A method declares its input as streams (`Stream`): each reads its own set
of training examples, ``batch_size`` of them per global step, with the
views it names (`llp_tf.data.augmentation.views`). `make_streams_input_fn` builds each
stream as the one-stream pipeline does (`input_fns.make_train_input_fn`:
epoch order, this worker's part, the resume's start step, passes, caching,
the tf.data service) and zips them: one element per step, ``{stream name:
{"index": int64 [b_s], "label": int64 [b_s], view key: float32 [b_s, S, S,
3], ...}}`` with b_s the stream's batch size / replicas; ``index`` is the
position in the stream's ``index``; ``label`` is -1 (`input_fns.UNLABELLED`)
for an example not labelled.

Every stream reads with a seed of its own (`stream_seed`): the first stream
with the run's seed, so that a one-stream method's batches are exactly the
one-stream pipeline's; each other with the run's seed salted by its name.
A stream's order and augmentation are thus a function of (run seed, stream,
epoch, example), whatever the number of replicas or workers, and resuming
at step k yields steps k.. of the epoch.
"""

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
    """One stream of a method's training input (see the module docstring).

    Attributes:
      index: int64 [N_s], sorted dataset indices of the examples it reads.
      batch_size: int, examples of this stream per global step; it must split
        evenly over the replicas.
      views: element key -> view policy, "weak" or "strong", in order (view 0
        has the example's own seed).
      repeats: let passes over ``index`` run into each other, so a set smaller
        than a batch can be read (a batch may then hold an example twice);
        never for a stream whose examples index a memory bank.
    """

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
    """``input_fn(input_context=None)`` of one training epoch of ``streams``.

    Args:
      source: a `Source`.
      streams: stream name -> `Stream`, in order (the first reads with ``seed``).
      image_size: int S.
      seed, epoch: ints >= 0, the run's seed and the epoch.
      start_step: int, global steps of this epoch already done (resume).
      steps: int, global steps of the epoch; a stream that does not repeat
        reads whole batches of each pass, pass after pass.
      labelled_index: int64 [L], the only examples whose label the batches carry.
      augmentation, min_crop_area, fused_crop, input_service, cycle_length,
        shuffle_block, augment_on: as `input_fns.make_train_input_fn` (with
        "device", `finish_batch` completes each step's batch).
      cached: names of the streams whose records are read once per epoch and
        held in memory (a small repeating set).

    Returns:
      input_fn(input_context or None) -> tf.data.Dataset of ``steps -
      start_step`` elements per replica, each {stream name: its element}
      (see the module docstring).

    Raises:
      ConfigError: no stream, or a stream's settings, naming the stream.
    """
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
    """A step's batch of device-side elements ({stream name: element}, made with
    ``augment_on="device"``) with every stream's views finished on this device
    (`views.finish_views`): the batch the host path gives."""
    return {name: views_lib.finish_views(batch[name], stream.views, augmentation)
            for name, stream in streams.items()}
