"""Image decoding that names the file or record it could not decode.

A decode op that fails inside tf.data raises TensorFlow's own error, which
says "Invalid JPEG data" but not which of a million images it was.
`decode_checked` runs the decodes in tiny datasets whose errors are caught
(`ignore_errors`): where the decoded results have static shapes (the
training input's resized crops), one per group of `GROUP_SIZE` records,
kept if the whole group came out; otherwise, and for a group with a
failure, one per record. When nothing comes out of a record's, a second
branch raises an assertion whose text names the example (file path, or
shard and record) and is marked so that `data_errors` can turn it into a
one-paragraph `DataError`. `decodable` runs the same test but yields
whether each image decodes, for a check of a whole dataset
(`llp_tf.data.splits.image_check`). A tiny dataset costs about 0.2-0.4 ms of CPU;
sources whose bytes were already decoded once when they were written (TFDS)
can use `decode_image` directly.
"""

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

from llp_tf.errors import DataError
from llp_tf.tensor_types import IntTensor, StringTensor, Tensor

_MARK_OPEN = "<<LLP_DATA_ERROR:"
_MARK_CLOSE = ":LLP_DATA_ERROR>>"
_MARKED = re.compile(re.escape(_MARK_OPEN) + r"(.*?)" + re.escape(_MARK_CLOSE), re.S)


def decode_image(encoded: StringTensor) -> IntTensor:
    """Decodes JPEG, PNG, GIF (first frame) or BMP bytes.

    Args:
      encoded: string [], the file's bytes.

    Returns:
      uint8 [H, W, 3]; grayscale images are expanded to three channels and an
      alpha channel is dropped.
    """
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return image


def fail(message: StringTensor | str, like: Any = None) -> Any:
    """Raises, inside a tf.data function, an error that `data_errors` turns
    into `DataError(message)`. ``message`` is a string tensor or str.

    Returns a placeholder, never produced, so that both branches of a decode
    have the same structure: zeros of the nest of `tf.TensorSpec` ``like``
    (unknown sizes 1), by default a uint8 [1, 1, 3] image.
    """
    text = tf.strings.join([_MARK_OPEN, message, _MARK_CLOSE])
    check = tf.debugging.Assert(False, [text], summarize=1)
    like = tf.TensorSpec([None, None, 3], tf.uint8) if like is None else like
    with tf.control_dependencies([check]):
        return tf.nest.map_structure(
            lambda spec: tf.zeros([1 if size is None else size for size in spec.shape],
                                  spec.dtype), like)


#: Records per group of the grouped check (`_groups_that_work`).
GROUP_SIZE = 8


def _first_that_works(records: tf.data.Dataset, attempt: Callable, otherwise: Callable
                      ) -> tf.data.Dataset:
    """Maps each record by ``attempt``, or by ``otherwise(record, spec)`` where
    ``attempt`` fails (``spec``: the element spec of ``attempt``'s results,
    the structure ``otherwise`` gives too), in the order of ``records``.

    Where ``attempt``'s results have static shapes, records are attempted in
    groups (`_groups_that_work`); otherwise one at a time.
    """
    spec = records.map(attempt).element_spec
    if all(leaf.shape.is_fully_defined() for leaf in tf.nest.flatten(spec)):
        return _groups_that_work(records, attempt, otherwise, GROUP_SIZE)
    return _each_that_works(records, attempt, otherwise)


def _each_that_works(records, attempt, otherwise):
    """`_first_that_works`, one tiny dataset per record (about 0.4 ms of CPU)."""
    def one(record):
        single = tf.data.Dataset.from_tensors(record)
        attempted = single.map(attempt)
        fallback = single.map(lambda r: otherwise(r, attempted.element_spec))
        return attempted.ignore_errors().concatenate(fallback).take(1)

    # Each inner dataset yields exactly one element, so a deterministic
    # interleave keeps the input order while decoding in parallel.
    return records.interleave(one, cycle_length=tf.data.AUTOTUNE, block_length=1,
                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _groups_that_work(records, attempt, otherwise, size):
    """`_first_that_works` for results of static shapes, ``size`` consecutive
    records at a time: a group whose every record ``attempt`` maps is kept
    whole; a group with a failure is mapped again record by record
    (`_each_that_works`), so ``otherwise`` sees the record that failed."""
    def group(batch):
        members = tf.data.Dataset.from_tensor_slices(batch)
        count = tf.shape(tf.nest.flatten(batch)[0])[0]
        whole = members.map(attempt).ignore_errors().batch(size).filter(
            lambda *results: tf.shape(tf.nest.flatten(results)[0])[0] == count)
        each = _each_that_works(members, attempt, otherwise).batch(size)
        return whole.concatenate(each).take(1)

    # One element per group, as in `_each_that_works`.
    return records.batch(size).interleave(
        group, cycle_length=tf.data.AUTOTUNE, block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()


def decode_checked(records: tf.data.Dataset,
                   load_fn: Callable[[dict[str, Tensor]], IntTensor],
                   describe_fn: Callable[[dict[str, Tensor]], StringTensor],
                   advice: str = "") -> tf.data.Dataset:
    """Maps records to decoded images, failing with a message naming the bad one.

    Args:
      records: tf.data.Dataset of dicts (one example's record each).
      load_fn: record -> uint8 [H, W, 3], or a nest of tensors holding the
        decoded image (e.g. a crop and where it lies); may read a file and decode.
      describe_fn: record -> string [], names the example for the message,
        e.g. "file /data/cat/1.jpg" or "shard /data/train-00003-of-00016,
        record 17".
      advice: str, what to do about it, the message's last sentences.

    Returns:
      Dataset of (record, image) in the order of ``records``.
    """
    def failure(record, spec):
        return record, fail(tf.strings.join([
            "Cannot read or decode the image of ", describe_fn(record),
            ": it is missing, empty, truncated, or not a JPEG, PNG, GIF or BMP image. ",
            advice]), like=spec[1])

    return _first_that_works(records, lambda r: (r, load_fn(r)), failure)


def decodable(records: tf.data.Dataset,
              load_fn: Callable[[dict[str, Tensor]], IntTensor]) -> tf.data.Dataset:
    """Dataset of (record, bool []): whether ``load_fn`` reads and decodes the
    record's image, in the order of ``records``, never failing."""
    def attempt(record):
        image = tf.reshape(load_fn(record), [-1])
        # Of an image of static shape, tf.size alone is a constant, and
        # TensorFlow would prune the decode (even past a control dependency);
        # a value read from the image keeps it.
        read = tf.reduce_sum(tf.cast(image[:1], tf.int32)) >= 0
        return record, (tf.size(image) > 0) & read

    return _first_that_works(records, attempt, lambda r, _: (r, tf.constant(False)))


def decode_unchecked(records: tf.data.Dataset,
                     load_fn: Callable[[dict[str, Tensor]], IntTensor]) -> tf.data.Dataset:
    """Like `decode_checked` for trusted bytes: Dataset of (record, image)."""
    return records.map(lambda r: (r, load_fn(r)), num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=True)


def data_error_message(error: BaseException) -> str | None:
    """The marked message inside a TensorFlow error raised by `fail`, or None."""
    match = _MARKED.search(str(getattr(error, "message", error)))
    return match.group(1) if match else None


@contextlib.contextmanager
def data_errors() -> Iterator[None]:
    """Turns a data error raised inside a tf.data pipeline into `DataError`.

    Wrap the loop that iterates a dataset of this package (the trainer's step
    loop, a tool's loop): a bad image then surfaces as a one-paragraph
    `DataError` naming the file or shard and record instead of a TensorFlow
    traceback. Other errors pass through unchanged.
    """
    try:
        yield
    except tf.errors.OpError as error:
        message = data_error_message(error)
        if message is None:
            raise
        raise DataError(message) from None
