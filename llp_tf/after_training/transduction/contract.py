"""What every method of the Table 5 comparison takes: unit embeddings float [n, D], a
labelled mask bool [n] and labels int [n] (read where labelled); and returns: int64 [n]
classes, labelled points keeping their label."""

import numpy as np

from llp_tf.tensor_types import Array


def check_inputs(embeddings: Array, labelled_mask: Array, labels: Array,
                 num_classes: int) -> tuple[Array, Array, Array]:
    """Float64 embeddings [n, D], bool mask [n], int64 labels [n]; ValueError: shapes that
    do not match, no labelled point, or a label outside ``[0, num_classes)``."""
    embeddings = np.asarray(embeddings, np.float64)
    labelled_mask = np.asarray(labelled_mask, bool)
    labels = np.asarray(labels, np.int64)
    n = embeddings.shape[0]
    if embeddings.ndim != 2 or labelled_mask.shape != (n,) or labels.shape != (n,):
        raise ValueError(f"Expected embeddings [n, D] with a mask and labels of [n]; got "
                         f"{embeddings.shape}, {labelled_mask.shape} and {labels.shape}.")
    if not labelled_mask.any():
        raise ValueError("No labelled point to propagate from.")
    known = labels[labelled_mask]
    if known.min() < 0 or known.max() >= num_classes:
        raise ValueError(f"Labels of labelled points must lie in [0, {num_classes}).")
    return embeddings, labelled_mask, labels


def with_labelled(predicted_unlabelled: Array, labelled_mask: Array, labels: Array) -> Array:
    """int64 [n]: the labels where known, the predictions (int [n - M]) elsewhere."""
    predictions = labels.copy()
    predictions[~labelled_mask] = predicted_unlabelled
    return predictions
