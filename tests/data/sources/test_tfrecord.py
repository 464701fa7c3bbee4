"""The authors' TFRecord format: index feature, labels, checks of bad shards."""

import json
import os

import numpy as np
import pytest

from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.sources import shards
from llp_tf.data.sources.registry import load_source
from llp_tf.errors import DataError
from tests.data.helpers import (example_bytes, make_tfrecord_set, random_image, encode,
                                write_shards)


def _raw(source, split):
    with data_errors():
        return list(source.raw_dataset(split).as_numpy_iterator())


def test_examples_by_index(tmp_path):
    truth = make_tfrecord_set(str(tmp_path))
    source = load_source(f"tfrecord:{tmp_path}")
    info = source.info
    assert (info.num_train, info.num_validation, info.num_classes) == (24, 7, 3)
    assert info.class_names == ("class0", "class1", "class2")
    for split in ("train", "validation"):
        images, labels = truth[split]
        np.testing.assert_array_equal(source.labels(split), labels)
        examples = _raw(source, split)
        assert sorted(int(e["index"]) for e in examples) == list(range(len(labels)))
        for example in examples:
            i = int(example["index"])
            assert example["label"] == labels[i]
            np.testing.assert_array_equal(example["image"], images[i])


def test_classes_numbered_without_info_file(tmp_path):
    make_tfrecord_set(str(tmp_path), num_classes=4, class_names=False)
    source = load_source(f"tfrecord:{tmp_path}")
    assert source.info.class_names == ("0", "1", "2", "3")


def test_scan_is_cached_for_large_sets(tmp_path, monkeypatch):
    make_tfrecord_set(str(tmp_path / "set"))
    monkeypatch.setattr(shards, "CACHE_MIN_BYTES", 0)
    first = load_source(f"tfrecord:{tmp_path / 'set'}").train_labels()
    assert len(os.listdir(shards.cache_dir())) == 2  # one scan per split

    def no_scan(*args):
        raise AssertionError("scanned again")

    monkeypatch.setattr(shards, "_scan_one", no_scan)
    np.testing.assert_array_equal(load_source(f"tfrecord:{tmp_path / 'set'}").train_labels(),
                                  first)


def test_missing_folder(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_source(f"tfrecord:{tmp_path / 'nowhere'}")


def test_no_train_shards(tmp_path):
    with pytest.raises(DataError, match="has no train-\\* shards"):
        load_source(f"tfrecord:{tmp_path}")


def test_empty_shards(tmp_path):
    write_shards(str(tmp_path), "train", [], 2)
    with pytest.raises(DataError, match="hold no records; the dataset is empty"):
        load_source(f"tfrecord:{tmp_path}")


def _records(indices, labels, rng):
    return [example_bytes(encode(random_image(rng, 6, 6), "png"), label, index)
            for index, label in zip(indices, labels)]


def test_duplicate_index_names_both_records(tmp_path):
    rng = np.random.default_rng(0)
    paths = write_shards(str(tmp_path), "train", _records([0, 1, 2, 3, 1, 5], [0] * 6, rng), 2)
    with pytest.raises(DataError) as error:
        load_source(f"tfrecord:{tmp_path}")
    message = str(error.value)
    assert "index 1 appears more than once" in message
    assert f"shard {paths[0]}, record 1" in message and f"shard {paths[1]}, record 1" in message


def test_out_of_range_index(tmp_path):
    rng = np.random.default_rng(0)
    paths = write_shards(str(tmp_path), "train", _records([0, 1, 7, 2], [0] * 4, rng), 1)
    with pytest.raises(DataError, match=f"index 7 at shard {paths[0]}, record 2 lies outside "
                                        r"\[0, 4\)"):
        load_source(f"tfrecord:{tmp_path}")


def test_label_outside_declared_classes(tmp_path):
    rng = np.random.default_rng(0)
    paths = write_shards(str(tmp_path), "train", _records([0, 1, 2], [0, 2, 1], rng), 1)
    with open(tmp_path / "dataset_info.json", "w") as f:
        json.dump({"class_names": ["a", "b"]}, f)
    with pytest.raises(DataError, match=rf"outside \[0, 2\); the first is 2 at shard "
                                        rf"{paths[0]}, record 1"):
        load_source(f"tfrecord:{tmp_path}")


def test_negative_label(tmp_path):
    rng = np.random.default_rng(0)
    write_shards(str(tmp_path), "train", _records([0, 1], [0, 1], rng), 1)
    write_shards(str(tmp_path), "validation", _records([0, 1], [1, -1], rng), 1)
    with pytest.raises(DataError, match=r"validation split.*the first is -1"):
        load_source(f"tfrecord:{tmp_path}")


def test_a_stray_label_is_named_with_its_record(tmp_path):
    rng = np.random.default_rng(0)
    labels = [0, 1, 2, 3] * 3
    labels[9] = 999
    paths = write_shards(str(tmp_path), "train", _records(range(12), labels, rng), 2)
    with pytest.raises(DataError) as error:
        load_source(f"tfrecord:{tmp_path}")
    assert str(error.value) == (
        f"TFRecord train split of {tmp_path}: the classes are counted from the largest label, "
        f"999 at shard {paths[1]}, record 3, which makes 1000 classes; 995 of them have no "
        "training example (classes 4, 5, 6, 7, 8, ...), and 1 record with labels beyond "
        "the first of them. "
        "A stray or mistyped label is the likely cause: fix it; or, if the classes really are "
        f"0..999, name them in {tmp_path / 'dataset_info.json'} "
        '({"class_names": [...]}).')


def test_labels_that_start_at_1_are_named_as_such(tmp_path):
    rng = np.random.default_rng(0)
    write_shards(str(tmp_path), "train", _records(range(8), [1, 2, 3, 4] * 2, rng), 1)
    with pytest.raises(DataError, match=r"^TFRecord train split of .*: no record has label 0 "
                                        r"and the labels run from 1 to 4: they appear to start "
                                        r"at 1, but labels must be class numbers from 0\. "):
        load_source(f"tfrecord:{tmp_path}")
    # With the classes declared, 1-based labels run out of range at the top: said too.
    with open(tmp_path / "dataset_info.json", "w") as f:
        json.dump({"class_names": ["a", "b", "c", "d"]}, f)
    with pytest.raises(DataError, match=r"the first is 4 at .* The labels run from 1 to C: "
                                        r"they appear to start at 1\."):
        load_source(f"tfrecord:{tmp_path}")
    # Declared classes may have no training example (a subset of a label space).
    with open(tmp_path / "dataset_info.json", "w") as f:
        json.dump({"class_names": ["none", "a", "b", "c", "d"]}, f)
    assert load_source(f"tfrecord:{tmp_path}").info.num_classes == 5


def test_missing_feature_names_the_record(tmp_path):
    rng = np.random.default_rng(0)
    records = _records([0, 1], [0, 0], rng)
    records.append(example_bytes(b"x", 0, 2)[:-5])  # unparseable tail
    paths = write_shards(str(tmp_path), "train", records, 1)
    with pytest.raises(DataError, match=f"cannot parse record 2 of shard {paths[0]}"):
        load_source(f"tfrecord:{tmp_path}")


def test_truncated_shard(tmp_path):
    rng = np.random.default_rng(0)
    paths = write_shards(str(tmp_path), "train", _records(range(5), [0] * 5, rng), 1)
    with open(paths[0], "rb") as f:
        content = f.read()
    with open(paths[0], "wb") as f:
        f.write(content[:-30])
    with pytest.raises(DataError, match=f"shard {paths[0]} is corrupt or truncated"):
        load_source(f"tfrecord:{tmp_path}")


def test_corrupt_image_names_shard_and_record(tmp_path):
    rng = np.random.default_rng(0)
    records = _records([3, 0, 1], [0, 1, 0], rng)
    records.insert(1, example_bytes(b"\xff\xd8\xff\xe0 broken jpeg", 1, 2))
    paths = write_shards(str(tmp_path), "train", records, 1)
    source = load_source(f"tfrecord:{tmp_path}")
    with pytest.raises(DataError, match=f"image of shard {paths[0]}, record 1 \\(train example "
                                        "2\\): .* Rebuild that shard with a valid image in that "
                                        "record, keeping its index and label, and "
                                        "rerun: the run resumes. Or leave out every bad image"):
        _raw(source, "train")
