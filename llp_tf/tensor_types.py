"""Names for annotations: what kind of tensor or array an argument is.

TensorFlow has no tensor type that carries a dtype, so, as in
tensorflow_similarity's ``types`` module, these names say in a signature
which dtype a function expects or returns; shapes stay in the docstrings.
They are for reading (and for `typing.get_type_hints`), not for checks:
nothing is an instance of the tensor classes, and a function annotated with
one accepts what TensorFlow converts (a `tf.Tensor`, a `tf.Variable`, a
numpy array, a nested list).

- `FloatTensor`, `IntTensor`, `BoolTensor`, `StringTensor`: a tensor of that
  dtype family (the docstring names the exact dtype, e.g. float32 or int64);
- `Tensor`: a tensor of any dtype (e.g. a nest of mixed dtypes);
- `Array`: a numpy array (`np.ndarray`), dtype in the docstring.
"""

import numpy as np


class Tensor:
    """A dense tensor of any dtype: `tf.Tensor`, `tf.Variable` or array-like."""


class FloatTensor(Tensor):
    """A floating-point tensor (float32 unless the docstring says otherwise)."""


class IntTensor(Tensor):
    """An integer tensor (int64 unless the docstring says otherwise)."""


class BoolTensor(Tensor):
    """A boolean tensor."""


class StringTensor(Tensor):
    """A string tensor (bytes, e.g. an encoded image or a file path)."""


#: A numpy array; its dtype and shape are in the docstring.
Array = np.ndarray

__all__ = ["Array", "BoolTensor", "FloatTensor", "IntTensor", "StringTensor", "Tensor"]
