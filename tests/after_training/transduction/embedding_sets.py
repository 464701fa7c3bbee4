"""Small sets of unit embeddings with classes, for the label propagation tests."""

import numpy as np

from tests import reference


def clusters(rng, num_classes, per_class, dim, spread):
    """Unit rows around num_classes random centres (float32 [n, dim]) and their
    classes (int64 [n]); a larger spread mixes the classes more."""
    centres = reference.unit_rows(rng, num_classes, dim, np.float64)
    points = np.repeat(centres, per_class, axis=0) + spread * rng.standard_normal(
        (num_classes * per_class, dim)) / np.sqrt(dim)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return points.astype(np.float32), np.repeat(np.arange(num_classes), per_class)


def labelled_first(classes, per_class):
    """bool [n]: the first per_class points of every class."""
    mask = np.zeros(len(classes), bool)
    for c in np.unique(classes):
        mask[np.flatnonzero(classes == c)[:per_class]] = True
    return mask


def mixed_set():
    """Overlapping classes, so that the methods disagree on some points:
    (embeddings float32 [90, 8], labelled mask, visible labels (-1 where
    unlabelled), true classes)."""
    rng = np.random.default_rng(7)
    x, y = clusters(rng, 3, 30, 8, spread=1.6)
    mask = labelled_first(y, 4)
    return x, mask, np.where(mask, y, -1), y


def one_hot(visible, num_classes):
    """float64 [n, C]: one-hot rows of the visible labels, zero rows where -1."""
    y = np.zeros((len(visible), num_classes))
    known = visible >= 0
    y[known, visible[known]] = 1.0
    return y
