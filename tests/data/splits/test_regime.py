"""Regime splits: class balance, the lowest-index rule, seeded draws, split files."""

import json

import numpy as np
import pytest

from llp_tf import make_splits
from llp_tf.data.splits import regime
from llp_tf.errors import ConfigError, DataError


def _labels():
    # Unequal classes: 40, 25 and 17 examples, interleaved in a fixed shuffle.
    labels = np.repeat([0, 1, 2], [40, 25, 17])
    return np.random.default_rng(3).permutation(labels)


def test_lowest_index_rule():
    labels = _labels()
    labelled, used = make_splits(labels, 10, 50)
    expected_labelled, expected_used = [], []
    for c, k, u in ((0, 4, 20), (1, 3, 13), (2, 2, 9)):  # round half up of p% and q%
        members = np.flatnonzero(labels == c)
        expected_labelled += list(members[:k])
        expected_used += list(members[:u])
    np.testing.assert_array_equal(labelled, np.sort(expected_labelled))
    np.testing.assert_array_equal(used, np.sort(expected_used))
    assert labelled.dtype == used.dtype == np.int64


def test_full_data_uses_everything():
    labels = _labels()
    labelled, used = make_splits(labels, 100, 100)
    np.testing.assert_array_equal(labelled, np.arange(labels.size))
    np.testing.assert_array_equal(used, np.arange(labels.size))


@pytest.mark.parametrize("seed", [None, 0, 7])
def test_balance_and_subset(seed):
    labels = _labels()
    labelled, used = make_splits(labels, 20, 60, seed=seed)
    np.testing.assert_array_equal(np.bincount(labels[labelled]), [8, 5, 3])
    np.testing.assert_array_equal(np.bincount(labels[used]), [24, 15, 10])
    assert np.all(np.isin(labelled, used))
    assert np.all(np.diff(labelled) > 0) and np.all(np.diff(used) > 0)


def test_seeded_draw_is_deterministic_and_seed_dependent():
    labels = _labels()
    first = make_splits(labels, 20, 60, seed=5)
    again = make_splits(labels, 20, 60, seed=5)
    other = make_splits(labels, 20, 60, seed=6)
    lowest = make_splits(labels, 20, 60)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], other[0])
    assert not np.array_equal(first[0], lowest[0])


def test_class_without_labelled_example():
    labels = np.repeat([0, 1], [100, 20])
    with pytest.raises(DataError, match=r"1 class would get no labelled example: "
                                        r"class 1 \(20 examples\).*at least 2\.5") as error:
        make_splits(labels, 2, 100)
    # The message names both ways out.
    assert "--split_file" in str(error.value) and "--label_subset" in str(error.value)


def _labels_one(label_percent, size):
    """Whether ``label_percent`` labels an example of a class of ``size`` (`make_splits`)."""
    try:
        make_splits(np.zeros(size, np.int64), label_percent, 100)
    except DataError:
        return False
    return True


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100, 140, 141, 1300, 4999, 123457])
def test_the_hinted_label_percent_is_the_smallest_of_its_digits_that_labels_one(size):
    value = regime.smallest_label_percent(size)
    assert _labels_one(value, size)
    # Three significant digits; one unit less in the last of them labels none.
    digits = 2 - int(np.floor(np.log10(value)))
    assert round(value, digits) == value and float(f"{value:.3g}") == value
    assert not _labels_one(round(value - 10.0 ** -digits, digits), size)
    # Within one unit above the exact threshold 50 / size (float64).
    assert 0 <= value - 50.0 / size < 10.0 ** -digits


def test_the_label_percent_a_refusal_hints_at_is_accepted(tmp_path):
    from tests.cli.tool_main import load_tool, run_main
    tool, output = load_tool("make_splits.py"), tmp_path / "split.npz"
    code, _, err = run_main(tool, "--dataset=digits", "--label_percent=0.001",
                            f"--output={output}")
    assert code == 1 and err.count("\n") == 1, err
    # digits' smallest training class: 50 / its size is 0.3571..., refused at 0.357.
    assert "raise --label_percent to at least 0.358 (class " in err, err
    hinted = err.split("--label_percent to at least ")[1].split(" ")[0]
    code, _, err = run_main(tool, "--dataset=digits", f"--label_percent={hinted}",
                            f"--output={output}")
    assert code == 0 and output.exists(), err
    code, _, err = run_main(tool, "--dataset=digits", "--label_percent=0.357",
                            f"--output={tmp_path / 'other.npz'}")
    assert code == 1 and "would get no labelled example" in err


def test_a_hinted_label_percent_above_data_percent_says_to_raise_both():
    labels = np.repeat([0, 1], [100, 20])
    with pytest.raises(DataError, match=r"at least 2\.5 \(and --data_percent with it, now "
                                        r"2\) \(class 1"):
        make_splits(labels, 1, 2)


def test_classes_missing_from_training_data_are_skipped():
    # 10 of 1000 classes present (a subset of ImageNet's synsets): not an error.
    rng = np.random.default_rng(0)
    present = np.array([3, 17, 250, 251, 400, 512, 640, 777, 900, 999])
    labels = rng.permutation(np.repeat(present, 20))
    labelled, used = make_splits(labels, 10, 100, num_classes=1000)
    np.testing.assert_array_equal(np.bincount(labels[labelled], minlength=1000)[present], 2)
    np.testing.assert_array_equal(used, np.arange(labels.size))
    assert regime.absent_classes_warning(labels, 1000) == (
        "warning: 990 of 1000 classes have no training example (classes 0, 1, 2, 4, 5, ...) "
        "and get no labelled example; the model keeps all 1000 class outputs.")
    assert regime.absent_classes_warning(labels, 1000).count("\n") == 0
    assert regime.absent_classes_warning(np.arange(5), 5) is None


def test_labels_outside_the_classes():
    with pytest.raises(DataError, match=r"classes \[0, 3\)"):
        make_splits(np.array([0, 1, 3]), 50, 100, num_classes=3)


@pytest.mark.parametrize("seed", [None, 4])
def test_used_subset_around_a_given_labelled_set(seed):
    labels = _labels()  # classes of 40, 25 and 17
    labelled = np.flatnonzero(labels == 0)[[5, 9]].tolist() + [int(np.flatnonzero(labels == 2)[3])]
    got_labelled, used = regime.splits_from_labelled(labels, labelled[::-1], 50, seed=seed)
    np.testing.assert_array_equal(got_labelled, np.sort(labelled))
    assert np.all(np.isin(labelled, used)) and np.all(np.diff(used) > 0)
    # round half up of 50%: 20, 13 and 9 used per class, labelled ones included.
    np.testing.assert_array_equal(np.bincount(labels[used]), [20, 13, 9])
    if seed is None:
        for c in range(3):
            members = np.flatnonzero(labels == c)
            mine = np.intersect1d(members, labelled)
            rest = np.setdiff1d(members, mine)[:[20, 13, 9][c] - mine.size]
            np.testing.assert_array_equal(np.intersect1d(used, members), np.union1d(mine, rest))
    # All data used: every example.
    np.testing.assert_array_equal(regime.splits_from_labelled(labels, labelled, 100)[1],
                                  np.arange(labels.size))


def test_used_subset_needs_a_labelled_set():
    with pytest.raises(DataError, match="empty"):
        regime.splits_from_labelled(_labels(), [], 100)
    with pytest.raises(DataError, match="outside"):
        regime.splits_from_labelled(_labels(), [1000], 100)


@pytest.mark.parametrize("p, q", [(0, 100), (101, 100), (10, 5)])
def test_bad_percentages(p, q):
    with pytest.raises(ConfigError):
        make_splits(_labels(), p, q)


def test_save_and_load_round_trip(tmp_path):
    labels = _labels()
    labelled, used = make_splits(labels, 10, 50, seed=1)
    path = str(tmp_path / "run" / "split.npz")
    regime.save_splits(path, labelled, used, labels, dataset_name="toy", label_percent=10,
                       data_percent=50, seed=1)
    loaded_labelled, loaded_used = regime.load_splits(path, labels)
    np.testing.assert_array_equal(loaded_labelled, labelled)
    np.testing.assert_array_equal(loaded_used, used)
    header = regime.read_split_header(path)
    assert (header["dataset_name"], header["num_train"], header["seed"]) == ("toy", 82, 1)
    with np.load(path) as data:
        assert sorted(data.files) == ["excluded_train_index", "excluded_validation_index",
                                      "header", "labelled_index", "used_index"]
        assert data["excluded_train_index"].size == data["excluded_validation_index"].size == 0
    assert (header["num_labelled"], header["num_used"]) == (labelled.size, used.size)
    assert regime.read_made_from(path) == {"label_subset": None, "exclude_list": None}


@pytest.mark.parametrize("seed", [None, 2])
def test_excluded_examples_are_neither_labelled_nor_used(seed):
    labels = _labels()  # classes of 40, 25 and 17
    excluded = np.concatenate([np.flatnonzero(labels == 0)[:5], np.flatnonzero(labels == 2)])
    labelled, used = make_splits(labels, 20, 60, seed=seed, excluded=excluded)
    assert not np.intersect1d(used, excluded).size and np.all(np.isin(labelled, used))
    # Percentages of the examples left: 35 and 25 (class 2 has none left, like an absent class).
    np.testing.assert_array_equal(np.bincount(labels[labelled], minlength=3), [7, 5, 0])
    np.testing.assert_array_equal(np.bincount(labels[used], minlength=3), [21, 15, 0])
    if seed is None:  # the lowest indices left
        np.testing.assert_array_equal(labelled[labels[labelled] == 0],
                                      np.flatnonzero(labels == 0)[5:12])
    given = np.flatnonzero(labels == 1)[:3]
    labelled, used = regime.splits_from_labelled(labels, given, 100, seed=seed,
                                                 excluded=[int(given[0]), *excluded])
    np.testing.assert_array_equal(labelled, given[1:])
    np.testing.assert_array_equal(used, np.setdiff1d(np.arange(labels.size), given[:1].tolist()
                                                     + excluded.tolist()))
    with pytest.raises(DataError, match="Every training example is excluded"):
        make_splits(labels, 20, 60, excluded=np.arange(labels.size))


def test_split_files_record_the_files_they_were_made_from(tmp_path):
    labels = _labels()
    path = str(tmp_path / "split.npz")
    made_from = {"label_subset": {"list": "1percent", "path": "/d/1percent.txt",
                                  "sha256": "ab" * 32},
                 "exclude_list": {"path": "/d/bad.txt", "sha256": "cd" * 32, "train": 1,
                                  "validation": 2}}
    regime.save_splits(path, np.array([3, 4]), np.arange(3, 10), labels, label_percent=None,
                       made_from=made_from,
                       excluded={"train": np.array([2]), "validation": np.array([0, 4])})
    assert regime.read_made_from(path) == made_from
    assert regime.read_split_header(path)["label_percent"] is None
    excluded = regime.read_split_exclusions(path)
    assert (excluded["train"].tolist(), excluded["validation"].tolist()) == ([2], [0, 4])
    np.testing.assert_array_equal(regime.load_splits(path, labels)[1], np.arange(3, 10))


def test_split_file_for_another_dataset(tmp_path):
    labels = _labels()
    path = str(tmp_path / "split.npz")
    regime.save_splits(path, *make_splits(labels, 10, 50), labels, dataset_name="toy")
    with pytest.raises(DataError, match=r"made for toy with 82 training examples, but mine "
                                        r"has 81 training examples\."):
        regime.load_splits(path, labels[:-1], dataset_name="mine")
    relabelled = labels.copy()
    relabelled[0] = (relabelled[0] + 1) % 3
    with pytest.raises(DataError, match="has other labels for its 82 training examples"):
        regime.load_splits(path, relabelled)


def test_missing_and_unreadable_split_files(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        regime.load_splits(str(tmp_path / "none.npz"), _labels())
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"garbage")
    with pytest.raises(DataError, match="is not a readable split file"):
        regime.load_splits(str(bad), _labels())
    # Files without one of today's keys, e.g. the labelled set spelled "labeled_index".
    header = {"format": regime.SPLIT_FORMAT, "label_subset": None, "exclude_list": None}
    arrays = {"labelled_index": [0], "used_index": [0, 1], "excluded_train_index": [],
              "excluded_validation_index": []}
    unknown = str(tmp_path / "unknown.npz")
    for old, renamed in [("labelled_index", "labeled_index"), ("excluded_train_index", "x"),
                         ("exclude_list", "x")]:
        written = {(renamed if key == old else key): np.array(value, np.int64)
                   for key, value in arrays.items()}
        np.savez(unknown, **written, header=json.dumps(
            {(renamed if key == old else key): value for key, value in header.items()}))
        with pytest.raises(DataError, match=f"not a readable split file .*{old}"):
            regime.read_made_from(unknown)


def test_dense_index():
    used = np.array([2, 5, 9])
    np.testing.assert_array_equal(regime.dense_index(used, [9, 2]), [2, 0])
    with pytest.raises(DataError):
        regime.dense_index(used, [3])
