"""The TFRecord builder: the release's numbering, re-encoding and its errors
(its tool and make_splits' are tested in tests/tools/test_data_tools.py)."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data import data_errors, load_source
from llp_tf.data.tfrecord_builder import build_tfrecords
from llp_tf.errors import DataError
from tests.data.helpers import decoded, write_image_folder



def test_build_numbers_images_in_the_seeded_permutation(tmp_path):
    train = write_image_folder(str(tmp_path / "images" / "train"), {"b": 4, "a": 5, "c": 3},
                               grayscale_every=3)
    validation = write_image_folder(str(tmp_path / "images" / "val"), {"a": 2, "c": 2}, seed=2)
    out = str(tmp_path / "records")
    summary = build_tfrecords(str(tmp_path / "images" / "train"), out,
                              validation_dir=str(tmp_path / "images" / "val"),
                              train_shards=5, validation_shards=3, log=lambda line: None)
    assert (summary["num_train"], summary["num_validation"]) == (12, 4)
    assert sorted(os.listdir(out)) == ["dataset_info.json"] + [
        f"train-{s:05d}-of-00005" for s in range(5)] + [
        f"validation-{s:05d}-of-00003" for s in range(3)]
    with open(os.path.join(out, "dataset_info.json")) as f:
        assert json.load(f)["class_names"] == ["a", "b", "c"]

    names = ["a", "b", "c"]
    permutation = np.random.RandomState(0).permutation(len(train))
    source = load_source(f"tfrecord:{out}")
    np.testing.assert_array_equal(source.train_labels(),
                                  [names.index(train[p][1]) for p in permutation])
    np.testing.assert_array_equal(source.validation_labels(),
                                  [names.index(c) for _, c, _ in validation])

    # Records are written in index order; PNGs are stored as JPEG.
    stored = [tf.train.Example.FromString(r.numpy())
              for r in tf.data.TFRecordDataset(sorted(
                  os.path.join(out, n) for n in os.listdir(out) if n.startswith("train-")))]
    assert [e.features.feature["index"].int64_list.value[0] for e in stored] == list(range(12))
    for example, p in zip(stored, permutation):
        content = example.features.feature["images"].bytes_list.value[0]
        assert content.startswith(b"\xff\xd8\xff")
        original = decoded(train[p][2])
        if train[p][2].startswith(b"\xff\xd8"):
            assert content == train[p][2]
        else:
            error = np.abs(decoded(content).astype(int) - original.astype(int)).mean()
            assert error < 12  # JPEG loss on tiny images; another image differs by ~60
    with data_errors():
        assert len(list(source.raw_dataset("train"))) == 12


def test_build_refuses_to_mix_with_existing_shards(tmp_path):
    write_image_folder(str(tmp_path / "train"), {"a": 2})
    build_tfrecords(str(tmp_path / "train"), str(tmp_path / "out"), log=lambda line: None)
    with pytest.raises(DataError, match="already holds shards"):
        build_tfrecords(str(tmp_path / "train"), str(tmp_path / "out"), log=lambda line: None)
