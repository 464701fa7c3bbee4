"""Exclude lists: their lines, what a split file records of them, and the
check that a resume excludes the same examples."""

import hashlib

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data.splits import exclusions, regime
from llp_tf.errors import DataError


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_lines_by_index_and_by_file(folder_source, tmp_path):
    paths = folder_source.paths("train")
    text = ("\ufeff# made by hand\n\ntrain 3\nvalidation 10  # file x\n"
            f"{paths[20]}\ntrain 3\n")
    path = _write(tmp_path / "exclude.txt", text)
    excluded = exclusions.read_exclude_list(path, folder_source)
    np.testing.assert_array_equal(excluded.train, [3, 20])
    np.testing.assert_array_equal(excluded.validation, [10])
    assert excluded.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert excluded.record() == {"path": path, "sha256": excluded.sha256, "train": 2,
                                 "validation": 1}
    assert exclusions.load(None, folder_source).record() is None


def test_what_check_data_writes_reads_back(tfrecord_source, tmp_path):
    text = exclusions.format_exclude_list(
        [("train", 28, "shard /s/train-00003-of-00004, record 6"),
         ("validation", 0, "shard /s/validation-00000-of-00002, record 2")],
        tfrecord_source.info.name)
    assert text.splitlines()[1:] == ["train 28  # shard /s/train-00003-of-00004, record 6",
                                     "validation 0  # shard /s/validation-00000-of-00002, "
                                     "record 2"]
    excluded = exclusions.read_exclude_list(_write(tmp_path / "x.txt", text), tfrecord_source)
    assert (excluded.train.tolist(), excluded.validation.tolist()) == ([28], [0])


@pytest.mark.parametrize("line, message", [
    ("train 29", r"line 2: train example 29 does not exist; tfrecord:.* has 29 train examples"),
    ("test 1", r"line 2: 'test 1' is neither 'train <index>' or 'validation <index>' nor an "
               r"image file of tfrecord:"),
    ("/data/a.jpg", r"line 2: '/data/a.jpg' is neither"),
])
def test_lines_that_name_no_example_are_refused(tfrecord_source, tmp_path, line, message):
    path = _write(tmp_path / "x.txt", f"train 1\n{line}\n")
    with pytest.raises(DataError, match=rf"^Exclude list {path}, {message}"):
        exclusions.read_exclude_list(path, tfrecord_source)


def test_excluded_records_are_dropped():
    records = tf.data.Dataset.from_tensor_slices({"index": np.array([4, 0, 3, 1, 2])})
    kept = exclusions.drop_excluded(records, 5, np.array([1, 4]))
    assert [int(r["index"]) for r in kept] == [0, 3, 2]
    assert exclusions.drop_excluded(records, 5, None) is records


def _split_file(path, excluded=None, record=None):
    labels = np.arange(10) % 2
    regime.save_splits(str(path), np.array([0, 1]), np.arange(10), labels,
                       made_from={"exclude_list": record},
                       excluded=excluded)
    return str(path)


def test_a_resume_must_exclude_the_same_examples(folder_source, tmp_path):
    list_path = _write(tmp_path / "exclude.txt", "train 3\n")
    same = exclusions.read_exclude_list(list_path, folder_source)
    split = _split_file(tmp_path / "split.npz", {"train": same.train,
                                                 "validation": same.validation}, same.record())
    exclusions.check_resume(split, same)
    # The same examples through another file: the same run.
    exclusions.check_resume(split, exclusions.read_exclude_list(
        _write(tmp_path / "copy.txt", "# a copy\ntrain 3\n"), folder_source))
    other = exclusions.read_exclude_list(_write(tmp_path / "more.txt", "train 3\ntrain 4\n"),
                                         folder_source)
    with pytest.raises(DataError) as error:
        exclusions.check_resume(split, other)
    assert str(error.value) == (
        f"The run whose split is {split} was started excluding 1 training and 0 validation "
        f"examples (the list {list_path}, SHA-256 {same.sha256}); --exclude_list now excludes "
        f"2 training and 0 validation examples (the list {tmp_path / 'more.txt'}, SHA-256 "
        f"{other.sha256}). A run keeps the examples it started with, or its split and memory "
        "bank no longer match: resume with the list it started with (its excluded examples "
        "are recorded in its split.npz), or start a new run with the new list.")
    with pytest.raises(DataError, match="excludes none. A run keeps"):
        exclusions.check_resume(split, exclusions.none())


def test_split_files_without_exclusions_resume_without_a_list(tmp_path, folder_source):
    split = str(tmp_path / "split.npz")
    regime.save_splits(split, np.array([0]), np.arange(4), np.zeros(4, np.int64))
    assert regime.read_made_from(split) == {"label_subset": None, "exclude_list": None}
    assert all(index.size == 0 for index in regime.read_split_exclusions(split).values())
    exclusions.check_resume(split, exclusions.none())
    with pytest.raises(DataError, match="was started without an exclude list; --exclude_list "
                                        "now excludes 1 training"):
        exclusions.check_resume(split, exclusions.read_exclude_list(
            _write(tmp_path / "x.txt", "train 0\n"), folder_source))
