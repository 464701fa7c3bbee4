"""How one int64 label tensor holds both classes and instance ids.

The memory bank keeps a single int64 label per example. A label in
``[0, num_classes)`` is a class: the true class of a labelled example or the
pseudo class of a propagated one. A label ``>= num_classes`` is an instance id:
example ``i`` that has not been propagated to yet carries
``num_classes + i``, which equals no class and no other example's label, so the
aggregation loss over such labels is exactly non-parametric instance
discrimination. (The authors' release stored ``N + class`` for classes and
``i`` for instances; only the uniqueness property matters.)
"""

import numpy as np
import tensorflow as tf

from llp_tf.tensor_types import Array, BoolTensor, IntTensor


def instance_labels(indices: IntTensor, num_classes: int | IntTensor) -> IntTensor:
    """Instance-id labels of examples.

    Args:
      indices: int64 [B], example indices in ``[0, N)``.
      num_classes: int, C.

    Returns:
      int64 [B], ``num_classes + indices``.
    """
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
