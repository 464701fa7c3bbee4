"""The dtype the memory bank stores its embeddings in (``--bank_dtype``): float32 as in the
paper, or bfloat16 / float16 at half the bytes. Storage only: a reader casts the rows it reads
up to float32 (`computed`) and computes in float32; the row update writes its float32 result
rounded to nearest (`stored`). At float32 neither adds an op to a graph."""

import tensorflow as tf

#: The storage dtypes of the bank's embeddings by name, the paper's first.
BANK_DTYPES = {"float32": tf.float32, "bfloat16": tf.bfloat16, "float16": tf.float16}
#: The storage dtypes that readers cast up.
HALF_DTYPES = (tf.bfloat16, tf.float16)
#: The dtype of every computation on the bank's rows.
COMPUTE_DTYPE = tf.float32


def storage_dtype(name: str | tf.DType) -> tf.DType:
    """The storage dtype named ``name`` (or that dtype itself): one of `BANK_DTYPES`; a
    ValueError naming the choices otherwise."""
    dtype = name if isinstance(name, tf.DType) else BANK_DTYPES.get(name)
    if dtype not in BANK_DTYPES.values():
        raise ValueError(f"the bank stores its embeddings as one of "
                         f"{', '.join(BANK_DTYPES)}; got {name!r}.")
    return dtype


def computed(rows: tf.Tensor) -> tf.Tensor:
    """``rows`` as the computation takes them: a bfloat16 or float16 tensor cast up to float32
    (exact), any other tensor as it is (no op)."""
    if rows.dtype in HALF_DTYPES:
        return tf.cast(rows, COMPUTE_DTYPE)
    return rows


def stored(rows: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """float32 ``rows`` as a bank of ``dtype`` stores them: rounded to nearest, or as they are
    (no op) at float32."""
    return rows if rows.dtype == dtype else tf.cast(rows, dtype)
