"""llp_tf/training/table_one.py: ImageNet's labelled images a class, and the demo's
--label_percent that gives exactly as many (make_splits' rule, on 400 a class)."""

import numpy as np
import pytest

from llp_tf.data.splits import regime
from llp_tf.errors import ConfigError
from llp_tf.training import table_one


def test_imagenets_labelled_images_a_class():
    # 1,281,167 / 1,000 = 1,281.167 a class: 1% is 12.81, 3% 38.44, 5% 64.06, 10% 128.12.
    assert {f: table_one.labelled_per_class(f) for f in table_one.FRACTIONS} == {
        "p1": 13, "p3": 38, "p5": 64, "p10": 128}


@pytest.mark.parametrize("fraction,percent", [("p1", 3.25), ("p10", 32.0)])
def test_the_label_percent_labels_that_many_of_each_of_mnist5ks_classes(fraction, percent):
    assert table_one.label_percent(fraction, 400) == percent
    labels = np.repeat(np.arange(10), 400)  # mnist5k: 400 training digits a class
    for seed in (None, 0, 1):
        labelled, _ = regime.make_splits(labels, percent, 100, seed=seed, num_classes=10)
        assert np.array_equal(np.bincount(labels[labelled]),
                              np.full(10, table_one.labelled_per_class(fraction)))


def test_unknown_or_too_large_fractions_are_refused():
    with pytest.raises(ConfigError, match="Unknown label fraction 'p2'; known: p1, p3"):
        table_one.labelled_per_class("p2")
    with pytest.raises(ConfigError, match="p10 labels 128 images a class, more than the 100"):
        table_one.label_percent("p10", 100)


def test_the_claims_are_table_1s_orderings():
    """Each ">" claim is an ordering of the paper's numbers; "≈" pairs lie within a point."""
    for fraction, claims in table_one.CLAIMS.items():
        top1 = table_one.PAPER_TOP1[fraction]
        for first, relation, second in claims:
            if relation == ">":
                assert top1[first] > top1[second]
            else:
                assert abs(top1[first] - top1[second]) < 1.0
