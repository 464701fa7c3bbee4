"""One int64 label per example holds a class or an instance id: ``[0, C)`` is a class (true or
propagated), ``C + i`` the instance id of example ``i`` not yet propagated to, unique, so the
aggregation loss over such labels is instance discrimination. (The authors' release stored
``N + class`` and ``i``; only the uniqueness matters.)"""

import numpy as np
import tensorflow as tf

from llp_tf.tensor_types import Array, BoolTensor, IntTensor


def instance_labels(indices: IntTensor, num_classes: int | IntTensor) -> IntTensor:
    """int64 [B]: ``num_classes + indices`` for example indices int64 [B] in ``[0, N)``."""
    return tf.cast(indices, tf.int64) + tf.cast(num_classes, tf.int64)


def is_class(labels: IntTensor, num_classes: int | IntTensor) -> BoolTensor:
    """bool [B]: True where a label is a class, False where it is an instance id."""
    labels = tf.convert_to_tensor(labels)
    return tf.logical_and(labels >= 0, labels < tf.cast(num_classes, labels.dtype))


def is_class_np(labels: Array, num_classes: int) -> Array:
    """`is_class` on numpy arrays: bool [...]."""
    labels = np.asarray(labels)
    return (labels >= 0) & (labels < num_classes)


def classes_or(labels: Array, num_classes: int, fill: int = -1) -> Array:
    """int64 [...]: each label where it is a class, ``fill`` where it is an instance id."""
    labels = np.asarray(labels, np.int64)
    return np.where(is_class_np(labels, num_classes), labels, fill).astype(np.int64)
