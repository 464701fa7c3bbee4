"""Image decoding that names the file or record it could not decode.

`decode_checked` runs the decodes in tiny datasets whose errors are caught (in groups of
`GROUP_SIZE` records where the results have static shapes); a record that fails raises an error
that `data_errors` turns into a `DataError` naming it. `decodable` yields whether each image
decodes."""

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
    """uint8 [H, W, 3] of JPEG, PNG, GIF (first frame) or BMP bytes (string []): grayscale
    expanded to three channels, alpha dropped."""
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return image


def fail(message: StringTensor | str, like: Any = None) -> Any:
    """Raises, inside a tf.data function, what `data_errors` turns into `DataError(message)`;
    returns a never-produced placeholder: zeros of the nest of `tf.TensorSpec` ``like``
    (default a uint8 [1, 1, 3] image)."""
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
    """Each record mapped by ``attempt``, or where it fails by ``otherwise(record, attempt's
    element spec)``, in order; in groups where the results have static shapes."""
    # Traced once here, not again in each dataset below that maps it.
    attempt = tf.function(attempt)
    spec = records.map(attempt).element_spec
    if all(leaf.shape.is_fully_defined() for leaf in tf.nest.flatten(spec)):
        return _groups_that_work(records, attempt, otherwise, GROUP_SIZE)
    return _each_that_works(records, attempt, otherwise)


def _each_that_works(records, attempt, otherwise):
    """`_first_that_works`, one tiny dataset per record."""
    def one(record):
        single = tf.data.Dataset.from_tensors(record)
        attempted = single.map(attempt)
        fallback = single.map(lambda r: otherwise(r, attempted.element_spec))
        return attempted.ignore_errors().concatenate(fallback).take(1)

    # One element per inner dataset: a deterministic interleave keeps the order.
    return records.interleave(one, cycle_length=tf.data.AUTOTUNE, block_length=1,
                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _groups_that_work(records, attempt, otherwise, size):
    """`_first_that_works` ``size`` records at a time: a group that maps whole is kept, one
    with a failure is mapped record by record."""
    def group(batch):
        members = tf.data.Dataset.from_tensor_slices(batch)
        count = tf.shape(tf.nest.flatten(batch)[0])[0]
        whole = members.map(attempt).ignore_errors().batch(size).filter(
            lambda *results: tf.shape(tf.nest.flatten(results)[0])[0] == count)
        each = _each_that_works(members, attempt, otherwise).batch(size)
        return whole.concatenate(each).take(1)

    return records.batch(size).interleave(
        group, cycle_length=tf.data.AUTOTUNE, block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()


def decode_checked(records: tf.data.Dataset,
                   load_fn: Callable[[dict[str, Tensor]], IntTensor],
                   describe_fn: Callable[[dict[str, Tensor]], StringTensor],
                   advice: str = "") -> tf.data.Dataset:
    """Dataset of (record, image) in the order of ``records``, ``load_fn`` (record -> uint8 [H,
    W, 3], or a nest holding it) of each; a failure names the record by ``describe_fn`` (record
    -> string []) and ends with ``advice``."""
    def failure(record, spec):
        return record, fail(tf.strings.join([
            "Cannot read or decode the image of ", describe_fn(record),
            ": it is missing, empty, truncated, or not a JPEG, PNG, GIF or BMP image. ",
            advice]), like=spec[1])

    return _first_that_works(records, lambda r: (r, load_fn(r)), failure)


def decodable(records: tf.data.Dataset,
              load_fn: Callable[[dict[str, Tensor]], IntTensor]) -> tf.data.Dataset:
    """Dataset of (record, bool []): whether ``load_fn`` reads and decodes each record's image,
    in order, never failing."""
    def attempt(record):
        image = tf.reshape(load_fn(record), [-1])
        # A value read from the image keeps TensorFlow from pruning the decode.
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
    """Context manager turning a data error raised inside a tf.data pipeline (`fail`) into a
    `DataError`; other errors pass through."""
    try:
        yield
    except tf.errors.OpError as error:
        message = data_error_message(error)
        if message is None:
            raise
        raise DataError(message) from None
