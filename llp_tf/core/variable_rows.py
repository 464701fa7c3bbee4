"""Row ranges of bank state that may live in a variable. A variable that has been scattered
into (the bank's rows are) is in copy-on-read mode: a whole read copies all of it, so the
bank's readers take a block of rows at a time with a gather of those rows."""

import tensorflow as tf


def as_rows(value, dtype: tf.DType):
    """``value`` as it is if a variable (read later by `rows`), else a ``dtype`` tensor."""
    return value if isinstance(value, tf.Variable) else tf.cast(value, dtype)


def rows(value, start, stop) -> tf.Tensor:
    """Rows ``[start, stop)`` of a tensor, or of a variable by a gather of just those rows;
    no gradient flows to them."""
    if isinstance(value, tf.Variable):
        return tf.stop_gradient(tf.gather(value, tf.range(start, stop)))
    return tf.stop_gradient(value[start:stop])
