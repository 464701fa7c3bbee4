"""Image folders: listing, labels, stable indices, decoded pixels, bad input."""

import os

import numpy as np
import pytest

from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.sources.folder import FolderSource
from llp_tf.data.sources.registry import load_source
from llp_tf.errors import DataError
from tests.data.helpers import decoded, write_image_folder


def _raw(source, split):
    with data_errors():
        return list(source.raw_dataset(split).as_numpy_iterator())


def test_train_and_validation_layout(tmp_path):
    train = write_image_folder(str(tmp_path / "train"), {"emu": 3, "cat": 4, "dog": 2},
                               grayscale_every=4)
    validation = write_image_folder(str(tmp_path / "validation"), {"dog": 2, "cat": 1}, seed=1)
    source = load_source(f"folder:{tmp_path}")

    assert source.info.class_names == ("cat", "dog", "emu")
    assert (source.info.num_train, source.info.num_validation) == (9, 3)
    assert source.info.image_size is None and source.info.channels == 3
    names = ["cat", "dog", "emu"]
    np.testing.assert_array_equal(source.train_labels(), [names.index(c) for _, c, _ in train])
    np.testing.assert_array_equal(source.validation_labels(),
                                  [names.index(c) for _, c, _ in validation])

    examples = _raw(source, "train")
    assert [int(e["index"]) for e in examples] == list(range(9))
    for example, (_, name, content) in zip(examples, train):
        assert example["label"] == names.index(name)
        assert example["image"].dtype == np.uint8 and example["image"].shape[2] == 3
        np.testing.assert_array_equal(example["image"], decoded(content))


def test_single_level_layout_has_no_validation(tmp_path):
    write_image_folder(str(tmp_path), {"a": 2, "b": 2})
    source = FolderSource(str(tmp_path))
    assert source.info.num_validation == 0
    with pytest.raises(DataError, match="no validation examples"):
        source.raw_dataset("validation")


def test_relative_folder_resolves_against_data_dir(tmp_path):
    write_image_folder(str(tmp_path / "set"), {"a": 1, "b": 1})
    source = load_source("folder:set", data_dir=str(tmp_path))
    assert source.info.name == f"folder:{tmp_path / 'set'}"


def test_missing_folder(tmp_path):
    with pytest.raises(DataError, match=r"does not exist.*class sub-folders"):
        load_source(f"folder:{tmp_path / 'nowhere'}")


def test_empty_folder(tmp_path):
    with pytest.raises(DataError, match="no class sub-folders, so the dataset is empty"):
        load_source(f"folder:{tmp_path}")


def test_empty_class_folder(tmp_path):
    write_image_folder(str(tmp_path), {"a": 1})
    os.makedirs(tmp_path / "b")
    with pytest.raises(DataError, match=r"Class folder .*b has no images"):
        load_source(f"folder:{tmp_path}")


def test_stray_file_is_named_not_dropped(tmp_path):
    write_image_folder(str(tmp_path), {"a": 2})
    (tmp_path / "a" / "notes.txt").write_text("x")
    with pytest.raises(DataError, match=r"notes\.txt is not an image file"):
        load_source(f"folder:{tmp_path}")


def test_unknown_validation_class(tmp_path):
    write_image_folder(str(tmp_path / "train"), {"a": 1, "b": 1})
    write_image_folder(str(tmp_path / "val"), {"c": 1})
    with pytest.raises(DataError, match="class sub-folder 'c' that the train split does not"):
        load_source(f"folder:{tmp_path}")


@pytest.mark.parametrize("corruption", ["truncated", "text", "empty"])
def test_corrupt_image_names_the_file(tmp_path, corruption):
    written = write_image_folder(str(tmp_path), {"a": 3, "b": 3})
    path, _, content = written[4]
    bad = {"truncated": content[:len(content) // 2], "text": b"not an image",
           "empty": b""}[corruption]
    with open(path, "wb") as f:
        f.write(bad)
    source = load_source(f"folder:{tmp_path}")
    with pytest.raises(DataError) as error:
        _raw(source, "train")
    message = str(error.value)
    assert message.startswith(f"Cannot read or decode the image of file {path} (train example "
                              "4): it is missing, empty, truncated, or not a JPEG, PNG, GIF or "
                              "BMP image. Replace the file with a valid image under the same "
                              "name (deleting it would renumber the examples, so that the run "
                              "could not resume), and rerun: the run resumes. Or leave out "
                              f"every bad image: llp-check-data --dataset=folder:{tmp_path} "
                              "--write_exclude_list=FILE finds them all, and a new run given "
                              "--exclude_list=FILE never draws them")
    assert "remove" not in message
    assert "\n" not in message and "Traceback" not in message
