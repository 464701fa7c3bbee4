"""Numbers that agree with their nouns (llp_tf/counted_nouns.py)."""

import numpy as np

from llp_tf.counted_nouns import counted, listed, numbered_range, plural


def test_plural_follows_the_regular_rule_of_the_last_word():
    assert [plural(noun) for noun in ("epoch", "class", "bank row", "box")] == [
        "epochs", "classes", "bank rows", "boxes"]


def test_one_takes_the_singular_and_every_other_count_the_plural():
    assert counted(1, "epoch") == "1 epoch"
    assert counted(0, "epoch") == "0 epochs"
    assert counted(3, "training example") == "3 training examples"
    assert counted(np.int64(1), "class") == "1 class"
    assert counted(np.int64(4), "class") == "4 classes"
    assert counted(2, "batch", "batches") == "2 batches"
    assert counted(1, "batch", "batches") == "1 batch"


def test_a_range_with_equal_ends_is_one_item():
    assert numbered_range("epoch", 1, 1) == "epoch 1"
    assert numbered_range("epoch", 1, 3) == "epochs 1-3"
    assert numbered_range("step", 0, 31) == "steps 0-31"


def test_a_long_list_shows_its_first_names_and_how_many_more():
    assert listed(["a", "b"]) == "a, b"
    assert listed(["a", "b", "c", "d"]) == "a, b, c, d"
    assert listed(["a", "b", "c", "d", "e", "f"]) == "a, b, c, d and 2 more"
    assert listed(["a", "b", "c"], shown=1) == "a and 2 more"
