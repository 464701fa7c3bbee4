import numpy as np
import pytest

from llp_tf.after_training.transduction import protocol
from llp_tf.after_training.transduction.methods import PropagationMethod, standard_methods
from llp_tf.errors import ConfigError, DataError
from tests import reference


def _clusters(rng, num_classes, per_class, dim, spread):
    """Unit rows float32 [n, dim] around random centres, and their classes [n]."""
    centres = reference.unit_rows(rng, num_classes, dim, np.float64)
    points = np.repeat(centres, per_class, axis=0) + spread * rng.standard_normal(
        (num_classes * per_class, dim)) / np.sqrt(dim)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return points.astype(np.float32), np.repeat(np.arange(num_classes), per_class)


def _uneven_labels():
    """int64 [N]: classes 0..5 with 12, 12, 12, 12, 5 and 12 examples, shuffled."""
    labels = np.repeat(np.arange(6), [12, 12, 12, 12, 5, 12])
    return np.random.default_rng(3).permutation(labels)


def test_draws_have_the_protocols_counts_and_repeat_by_seed():
    labels = _uneven_labels()
    draws = protocol.draw_subsets(labels, 3, 10, 2, 6, seed=5)
    assert len(draws) == 6
    for draw in draws:
        assert draw.index.shape == (30,) and len(np.unique(draw.index)) == 30
        true = labels[draw.index]
        drawn_classes = np.unique(true)
        assert len(drawn_classes) == 3 and 4 not in drawn_classes  # class 4 has 5 < 10
        for renumbered, original in enumerate(drawn_classes):
            rows = draw.classes == renumbered
            assert rows.sum() == 10 and np.all(true[rows] == original)
            assert draw.labelled_mask[rows].sum() == 2
    again = protocol.draw_subsets(labels, 3, 10, 2, 6, seed=5)
    other = protocol.draw_subsets(labels, 3, 10, 2, 6, seed=6)
    assert all(np.array_equal(a.index, b.index) for a, b in zip(draws, again))
    assert not all(np.array_equal(a.index, b.index) for a, b in zip(draws, other))


def _spy(name, right_on_labelled, calls):
    """A method that reads each point's class from its one-hot feature (the
    renumbering learnt from the labelled points) and answers wrong on either
    the labelled or the unlabelled points."""
    def predict(x, mask, visible, num_classes):
        calls.append((x.copy(), mask.copy(), visible.copy()))
        original = x.argmax(axis=1)
        renumber = dict(zip(original[mask], visible[mask]))
        right = np.array([renumber[o] for o in original])
        wrong = (right + 1) % num_classes
        return np.where(mask == right_on_labelled, right, wrong)
    return PropagationMethod(name, name, predict)


def test_only_the_unlabelled_drawn_points_are_scored():
    labels = _uneven_labels()
    features = 3.0 * np.eye(6)[labels]  # not unit length: compare_methods normalises
    calls = []
    methods = [_spy("right_on_unlabelled", False, calls), _spy("right_on_labelled", True, [])]
    comparison = protocol.compare_methods(features, labels, methods, 3, 10, 2, 4, seed=0)
    np.testing.assert_array_equal(comparison.accuracy["right_on_unlabelled"], np.ones(4))
    np.testing.assert_array_equal(comparison.accuracy["right_on_labelled"], np.zeros(4))
    assert comparison.mean("right_on_unlabelled") == 1.0
    assert comparison.std("right_on_unlabelled") == 0.0
    for x, mask, visible in calls:
        np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-6)
        assert mask.sum() == 6 and np.all(visible[~mask] == -1)
        assert sorted(np.unique(visible[mask])) == [0, 1, 2]


def test_accuracies_are_means_over_draws_and_repeat_by_seed():
    rng = np.random.default_rng(2)
    x, y = _clusters(rng, 5, 20, 8, spread=1.4)
    methods = standard_methods(k=3, t=5, temperature=0.1)[:2]
    first = protocol.compare_methods(x, y, methods, 3, 12, 2, 3, seed=4)
    second = protocol.compare_methods(x, y, methods, 3, 12, 2, 3, seed=4)
    for method in methods:
        np.testing.assert_array_equal(first.accuracy[method.name], second.accuracy[method.name])
        values = first.accuracy[method.name]
        assert first.mean(method.name) == pytest.approx(values.mean())
        assert first.std(method.name) == pytest.approx(np.sqrt(
            np.sum((values - values.mean()) ** 2) / (len(values) - 1)))
    # Draw 1 by hand: LLP on the first subset, scored on its 30 unlabelled points.
    draw = protocol.draw_subsets(y, 3, 12, 2, 3, seed=4)[0]
    sub = x[draw.index]
    density = reference.local_density(sub[draw.labelled_mask], sub, 5, 0.1)
    expected, _, _ = reference.propagate(sub[~draw.labelled_mask], sub[draw.labelled_mask],
                                         draw.classes[draw.labelled_mask], 3, 3, 0.1, density)
    assert first.accuracy["local_knn"][0] == pytest.approx(
        np.mean(expected == draw.classes[~draw.labelled_mask]))


@pytest.mark.parametrize("settings, message", [
    (dict(num_classes=3, images_per_class=10, labelled_per_class=10), "must be smaller than"),
    (dict(num_classes=7, images_per_class=10, labelled_per_class=2), "only 6 classes"),
    (dict(num_classes=6, images_per_class=10, labelled_per_class=2),
     "only 5 of the 6 classes have 10 images .class sizes range from 5 to 12"),
    (dict(num_classes=1, images_per_class=10, labelled_per_class=2), "classes must be at least 2"),
])
def test_impossible_protocols_are_clear_errors(settings, message):
    with pytest.raises(ConfigError, match=message):
        protocol.draw_subsets(_uneven_labels(), draws=2, seed=0, **settings)


def test_zero_feature_rows_are_a_clear_error():
    features = np.ones((4, 3))
    features[2] = 0.0
    with pytest.raises(DataError, match="Feature row 12 is zero or not finite"):
        protocol.normalize_rows(features, row_ids=np.array([10, 11, 12, 13]))
    labels = np.repeat([0, 1], 2)
    methods = standard_methods()[:1]
    with pytest.raises(DataError, match="Feature row 2 is zero"):
        protocol.compare_methods(features, labels, methods, 2, 2, 1, 1, seed=0)


def test_a_sweep_scores_the_same_draws_with_nested_labelled_sets():
    labels = _uneven_labels()
    features = 3.0 * np.eye(6)[labels]
    calls = []
    methods = [_spy("spy", False, calls)]
    sweep = protocol.compare_sweep(features, labels, methods, 3, 10, [4, 2, 4], 3, seed=5)
    assert sorted(sweep) == [2, 4]
    assert all(np.array_equal(sweep[level].accuracy["spy"], np.ones(3)) for level in (2, 4))
    # Six calls, level 2's three draws first: the same rows as compare_methods draws with the
    # same seed; each class's first 2 (then 4) drawn images are labelled.
    assert len(calls) == 6
    single = protocol.draw_subsets(labels, 3, 10, 2, 3, seed=5)
    for number, draw in enumerate(single):
        two, four = calls[number], calls[3 + number]
        np.testing.assert_array_equal(two[1], draw.labelled_mask)
        np.testing.assert_array_equal(two[0], four[0])  # the same images
        assert four[1].sum() == 12 and np.all(four[1][two[1]])  # 2 labelled among the 4
        position = np.tile(np.arange(10), 3)
        np.testing.assert_array_equal(four[1], position < 4)


def test_a_sweep_level_the_images_do_not_allow_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"labelled_per_class \(10\) must be smaller than "
                                          r"images_per_class \(10\)"):
        protocol.compare_sweep(np.eye(6)[_uneven_labels()], _uneven_labels(), [], 3, 10,
                               [2, 10], 1, seed=0)


def test_the_class_draw_is_vacuous_when_no_more_classes_have_the_images_than_a_draw_takes():
    labels = _uneven_labels()  # six classes, one of them with 5 images, the others 12
    assert protocol.eligible_classes(labels, 10) == 5
    assert protocol.class_draw_is_vacuous(labels, 5, 10)
    assert not protocol.class_draw_is_vacuous(labels, 4, 10)
    assert protocol.class_draw_is_vacuous(labels, 6, 5)
    # Vacuous indeed: every draw of 5 classes of 10 images takes the same five.
    draws = protocol.draw_subsets(labels, 5, 10, 2, 4, seed=1)
    assert {tuple(np.unique(labels[d.index])) for d in draws} == {(0, 1, 2, 3, 5)}
