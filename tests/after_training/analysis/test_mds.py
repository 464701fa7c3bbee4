import numpy as np
import pytest

from llp_tf.after_training.analysis import mds
from llp_tf.errors import ConfigError


def test_chord_distances_are_euclidean_distances_of_the_unit_rows():
    rows = np.random.default_rng(0).normal(size=(6, 5)) * 3.0
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    expected = np.linalg.norm(unit[:, None, :] - unit[None, :, :], axis=2)
    np.testing.assert_allclose(mds.chord_distances(rows), expected, atol=1e-12)


def test_mds_recovers_a_planar_configuration_exactly():
    # Unit rows on one great circle of a 16-D sphere: their chord distances
    # are those of points on a plane circle, so a 2-D layout fits exactly.
    rng = np.random.default_rng(1)
    basis = np.linalg.qr(rng.normal(size=(16, 2)))[0]  # [16, 2] orthonormal
    angles = rng.uniform(0, 2 * np.pi, 30)
    rows = np.stack([np.cos(angles), np.sin(angles)], axis=1) @ basis.T
    coordinates, stress = mds.mds_2d(rows, seed=0)
    assert coordinates.shape == (30, 2)
    planar = np.linalg.norm(coordinates[:, None] - coordinates[None], axis=2)
    np.testing.assert_allclose(planar, mds.chord_distances(rows), atol=1e-3)
    assert stress < 1e-3


def test_mds_keeps_two_separated_clusters_apart():
    rng = np.random.default_rng(2)
    centre = np.zeros(16)
    centre[0] = 1.0
    rows = np.concatenate([centre + rng.normal(0, 0.08, (40, 16)),
                           -centre + rng.normal(0, 0.08, (40, 16))])
    coordinates, _ = mds.mds_2d(rows, seed=3)
    distances = np.linalg.norm(coordinates[:, None] - coordinates[None], axis=2)
    within = np.concatenate([distances[:40, :40].ravel(), distances[40:, 40:].ravel()])
    assert within.max() < distances[:40, 40:].min()
    # Distance order is kept roughly: rank correlation of all pairs.
    original = mds.chord_distances(rows)[np.triu_indices(80, 1)]
    projected = distances[np.triu_indices(80, 1)]
    ranks = [np.argsort(np.argsort(d)) for d in (original, projected)]
    assert np.corrcoef(*ranks)[0, 1] > 0.8


def test_sample_rows_takes_labelled_rows_first_and_caps_each_class():
    classes = np.array([0] * 10 + [1] * 3 + [2] * 8)
    is_labelled = np.zeros(classes.size, bool)
    is_labelled[[0, 1, 10, 13, 14, 15, 16]] = True  # 2 of class 0, 1 of class 1, 4 of class 2
    rows = mds.sample_rows(classes, is_labelled, [2, 1, 0], points_per_class=3, seed=0)
    assert classes[rows].tolist() == [2, 2, 2, 1, 1, 1, 0, 0, 0]
    assert is_labelled[rows].tolist() == [True] * 3 + [True, False, False] + [True, True, False]
    assert np.unique(rows).size == rows.size
    again = mds.sample_rows(classes, is_labelled, [2, 1, 0], points_per_class=3, seed=0)
    assert rows.tolist() == again.tolist()


def test_choose_classes_is_seeded_and_refuses_too_many():
    counts = np.array([5, 0, 3, 4, 1])
    chosen = mds.choose_classes(counts, 3, seed=4)
    assert chosen.tolist() == sorted(chosen.tolist()) and 1 not in chosen
    assert chosen.tolist() == mds.choose_classes(counts, 3, seed=4).tolist()
    assert mds.choose_classes(counts, 4, seed=0).tolist() == [0, 2, 3, 4]
    with pytest.raises(ConfigError, match="asks for 5 classes.*only 4.*--classes=4"):
        mds.choose_classes(counts, 5, seed=0)
