"""A 2-D metric MDS of bank rows of a few seeded classes (the paper's Figure 2), on the
chord distances ``sqrt(2 - 2 cos)`` of the unit rows."""

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from llp_tf.counted_nouns import counted
from llp_tf.errors import ConfigError
from llp_tf.tensor_types import Array

# scikit-learn's default.
MDS_MAX_ITERATIONS = 300


def choose_classes(counts: Array, num_chosen: int, seed: int) -> Array:
    """int64 [num_chosen]: a sorted seeded draw of the classes with rows (``counts`` int
    [C]); ConfigError when fewer have rows."""
    present = np.flatnonzero(np.asarray(counts) > 0)
    if num_chosen > present.size:
        raise ConfigError(
            f"The MDS plot asks for {counted(num_chosen, 'class')}, but the run's bank holds "
            f"examples of only {present.size}. Give --classes={present.size} or fewer.")
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(present, size=num_chosen, replace=False)).astype(np.int64)


def mds_classes(counts: Array, num_chosen: int | None, class_ids: Sequence[int] | Array | None,
                seed: int) -> Array:
    """int64 [K]: the given ``class_ids`` (checked, sorted), or a seeded draw of ``num_chosen``.

    Raises:
      ConfigError: a given class out of range, repeated or without rows, or
        more classes asked for than have rows.
    """
    if class_ids is None:
        return choose_classes(counts, num_chosen, seed)
    class_ids = np.asarray(class_ids, np.int64)
    num_classes = len(counts)
    bad = [int(c) for c in class_ids if not 0 <= c < num_classes or counts[c] == 0]
    if bad or np.unique(class_ids).size != class_ids.size:
        raise ConfigError(
            f"The MDS classes {class_ids.tolist()} must be distinct classes in "
            f"[0, {num_classes}) that have examples in the bank; {bad or 'some repeat'} do not.")
    return np.sort(class_ids)


def sample_rows(true_classes: Array, is_labelled: Array, class_ids: Sequence[int] | Array,
                points_per_class: int, seed: int) -> Array:
    """int64 [P]: up to ``points_per_class`` bank rows of each of ``class_ids``, grouped by
    class, labelled rows first, then a seeded draw of unlabelled ones."""
    rng = np.random.default_rng(seed)
    true_classes = np.asarray(true_classes)
    is_labelled = np.asarray(is_labelled, bool)
    chosen = []
    for c in class_ids:
        labelled = np.flatnonzero((true_classes == c) & is_labelled)
        unlabelled = np.flatnonzero((true_classes == c) & ~is_labelled)
        take_labelled = min(labelled.size, points_per_class)
        take_unlabelled = min(unlabelled.size, points_per_class - take_labelled)
        chosen.append(np.sort(rng.choice(labelled, take_labelled, replace=False)))
        chosen.append(np.sort(rng.choice(unlabelled, take_unlabelled, replace=False)))
    return np.concatenate(chosen).astype(np.int64)


def chord_distances(rows: Array) -> Array:
    """float64 [P, P]: euclidean distances between ``rows`` float [P, D] scaled to unit norm."""
    unit = np.asarray(rows, np.float64)
    unit = unit / np.linalg.norm(unit, axis=1, keepdims=True)
    cosine = np.clip(unit @ unit.T, -1.0, 1.0)
    distances = np.sqrt(np.maximum(2.0 - 2.0 * cosine, 0.0))
    distances = (distances + distances.T) / 2.0
    np.fill_diagonal(distances, 0.0)
    return distances


def mds_2d(rows: Array, seed: int) -> tuple[Array, float]:
    """(coordinates float64 [P, 2], Stress-1: 0 a perfect fit, above 0.2 a poor one) of a
    metric MDS of ``rows`` float [P, D] by chord distance."""
    from sklearn.manifold import MDS  # noqa: PLC0415

    mds = MDS(n_components=2, metric_mds=True, metric="precomputed", init="classical_mds",
              max_iter=MDS_MAX_ITERATIONS, random_state=seed, normalized_stress=True)
    coordinates = mds.fit_transform(chord_distances(rows))
    return np.asarray(coordinates, np.float64), float(mds.stress_)


@dataclasses.dataclass(frozen=True)
class MDSProjection:
    """A 2-D MDS of bank ``rows`` int64 [P] of ``class_ids`` int64 [K]: their ``classes``
    int64 [P], ``labelled`` bool [P], ``coordinates`` float64 [P, 2] and Stress-1."""

    class_ids: np.ndarray
    rows: np.ndarray
    classes: np.ndarray
    labelled: np.ndarray
    coordinates: np.ndarray
    stress: float


def project_classes(embeddings_at: Callable[[Array], Array], true_classes: Array,
                    is_labelled: Array, class_ids: Sequence[int] | Array, points_per_class: int,
                    seed: int) -> MDSProjection:
    """`MDSProjection` of up to ``points_per_class`` rows of each class in ``class_ids``;
    ``embeddings_at(rows int64 [P])`` gives the bank's embeddings of those rows, [P, D]."""
    rows = sample_rows(true_classes, is_labelled, class_ids, points_per_class, seed)
    if rows.size < 2:
        raise ConfigError(f"The MDS needs at least 2 rows; the classes {list(class_ids)} have "
                          f"{rows.size}. Choose other classes or more points per class.")
    coordinates, stress = mds_2d(np.asarray(embeddings_at(rows)), seed)
    return MDSProjection(class_ids=np.asarray(class_ids, np.int64), rows=rows,
                         classes=np.asarray(true_classes)[rows].astype(np.int64),
                         labelled=np.asarray(is_labelled, bool)[rows], coordinates=coordinates,
                         stress=stress)
