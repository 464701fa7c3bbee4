"""Row ranges of bank state that may live in a variable. A variable that has been scattered
into (the bank's rows are) is in copy-on-read mode: a whole read copies all of it, so the
bank's readers take a block of rows at a time with a gather of those rows. Rows stored at
half precision (`bank_dtype`) come back cast up to float32, a block at a time."""

from typing import NamedTuple, Union

import tensorflow as tf

from llp_tf.core import bank_dtype
from llp_tf.tensor_types import Array, IntTensor


class GatheredRows(NamedTuple):
    """The rows ``index`` (int [M], static M) of ``variable`` [N, D], as an [M, D] whose
    blocks `rows` gathers one at a time: no [M, D] copy."""
    variable: tf.Variable
    index: IntTensor | tf.Variable

    @property
    def shape(self) -> tf.TensorShape:
        return tf.TensorShape(self.index.shape[:1]).concatenate(self.variable.shape[1:])


#: What the readers take: a tensor (or anything convertible), a variable, or `GatheredRows`.
Rows = Union[tf.Tensor, tf.Variable, GatheredRows, Array]


def as_rows(value: "Rows", dtype: tf.DType) -> "Rows":
    """``value`` as it is if a variable or `GatheredRows` (read later by `rows`), or a tensor
    of half-precision rows where ``dtype`` is float32 (cast up by `rows`, a block at a time),
    else a ``dtype`` tensor."""
    if isinstance(value, (tf.Variable, GatheredRows)):
        return value
    value = tf.convert_to_tensor(value)
    if dtype == bank_dtype.COMPUTE_DTYPE and value.dtype in bank_dtype.HALF_DTYPES:
        return value
    return tf.cast(value, dtype)


def rows(value: "Rows", start: int | IntTensor, size: int | IntTensor) -> tf.Tensor:
    """``size`` rows from ``start`` of a tensor, or of a variable or `GatheredRows` by a gather
    of just those rows, half-precision ones cast up to float32 (`bank_dtype.computed`); no
    gradient flows to them. A static ``size`` keeps the shape static (XLA needs it)."""
    if isinstance(value, GatheredRows):
        read = tf.gather(value.variable, rows(value.index, start, size))
    elif isinstance(value, tf.Variable):
        read = tf.gather(value, start + tf.range(size))
    else:
        rank = len(value.shape)
        read = tf.slice(value, [start] + [0] * (rank - 1), [size] + [-1] * (rank - 1))
    return tf.stop_gradient(bank_dtype.computed(read))


def whole(value: "Rows") -> "Rows":
    """All rows of a `GatheredRows` gathered, of a half-precision variable or tensor read and
    cast up to float32 (a transient float32 copy of them all), anything else as it is (a
    small bank's read)."""
    if isinstance(value, GatheredRows) or (isinstance(value, (tf.Variable, tf.Tensor))
                                           and value.dtype in bank_dtype.HALF_DTYPES):
        return rows(value, 0, value.shape[0])
    return value
