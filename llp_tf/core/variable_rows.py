"""Row ranges of bank state that may live in a variable. A variable that has been scattered
into (the bank's rows are) is in copy-on-read mode: a whole read copies all of it, so the
bank's readers take a block of rows at a time with a gather of those rows."""

from typing import NamedTuple, Union

import tensorflow as tf

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
    """``value`` as it is if a variable or `GatheredRows` (read later by `rows`), else a
    ``dtype`` tensor."""
    return value if isinstance(value, (tf.Variable, GatheredRows)) else tf.cast(value, dtype)


def rows(value: "Rows", start: int | IntTensor, size: int | IntTensor) -> tf.Tensor:
    """``size`` rows from ``start`` of a tensor, or of a variable or `GatheredRows` by a gather
    of just those rows; no gradient flows to them. A static ``size`` keeps the shape static
    (XLA needs it)."""
    if isinstance(value, GatheredRows):
        return tf.stop_gradient(tf.gather(value.variable, rows(value.index, start, size)))
    if isinstance(value, tf.Variable):
        return tf.stop_gradient(tf.gather(value, start + tf.range(size)))
    rank = len(value.shape)
    return tf.stop_gradient(tf.slice(value, [start] + [0] * (rank - 1), [size] + [-1] * (rank - 1)))


def whole(value: "Rows") -> "Rows":
    """All rows of a `GatheredRows` gathered, anything else as it is (a small bank's read)."""
    return rows(value, 0, value.shape[0]) if isinstance(value, GatheredRows) else value
