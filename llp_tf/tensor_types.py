"""Names for annotations that say a tensor's dtype family (as tensorflow_similarity's
``types``); shapes and exact dtypes are in the docstrings. For reading only: nothing is an
instance of them, and an annotated argument accepts what TensorFlow converts."""

import numpy as np


class Tensor:
    """A dense tensor of any dtype."""


class FloatTensor(Tensor):
    """A floating-point tensor (float32 unless the docstring says otherwise)."""


class IntTensor(Tensor):
    """An integer tensor (int64 unless the docstring says otherwise)."""


class BoolTensor(Tensor):
    """A boolean tensor."""


class StringTensor(Tensor):
    """A string tensor (bytes: an encoded image, a file path)."""


Array = np.ndarray

__all__ = ["Array", "BoolTensor", "FloatTensor", "IntTensor", "StringTensor", "Tensor"]
