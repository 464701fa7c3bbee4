"""Finding every undecodable image of a split, with where it is; the check of
the validation split before a run starts."""

import numpy as np
import pytest

from llp_tf.data.sources.registry import load_source
from llp_tf.data.splits import image_check
from llp_tf.data.splits.image_check import BadImage
from llp_tf.errors import DataError
from tests.data.helpers import (encode, example_bytes, random_image, write_image_folder,
                                write_shards)


@pytest.fixture
def damaged_folder(tmp_path):
    """An image folder (train 12, validation 4) with three damaged training
    images: a JPEG cut short, an empty file and text; returns (root, paths)."""
    written = write_image_folder(str(tmp_path / "train"), {"a": 6, "b": 6})
    write_image_folder(str(tmp_path / "validation"), {"a": 2, "b": 2}, seed=1)
    jpeg = next(i for i, (path, _, _) in enumerate(written) if path.endswith(".jpg") and i > 5)
    damage = {2: b"", 5: b"just text", jpeg: written[jpeg][2][:len(written[jpeg][2]) // 2]}
    for index, content in damage.items():
        with open(written[index][0], "wb") as f:
            f.write(content)
    return tmp_path, {index: written[index][0] for index in damage}


def test_every_bad_image_is_named_by_index_and_file(damaged_folder):
    root, damaged = damaged_folder
    source = load_source(f"folder:{root}")
    progress = []
    bad = image_check.find_bad_images(source, "train",
                                      on_progress=lambda done, n: progress.append((done, n)))
    assert bad == [BadImage("train", index, f"file {path}")
                   for index, path in sorted(damaged.items())]
    assert progress == [(12, 3)]
    assert image_check.find_bad_images(source, "validation") == []
    # Examples already excluded are not read.
    assert image_check.find_bad_images(source, "train", skip=sorted(damaged)[:2]) == bad[2:]


def test_a_bad_record_of_a_shard_is_named_by_shard_and_record(tmp_path):
    rng = np.random.default_rng(0)
    records = [example_bytes(encode(random_image(rng, 8, 8), "jpeg"), i % 2, i)
               for i in range(5)]
    records[3] = example_bytes(b"\xff\xd8\xff\xe0 broken", 1, 3)
    paths = write_shards(str(tmp_path), "train", records, 2)
    source = load_source(f"tfrecord:{tmp_path}")
    assert image_check.find_bad_images(source, "train") == [
        BadImage("train", 3, f"shard {paths[1]}, record 1")]


def test_a_bad_validation_image_is_refused_with_what_to_do(damaged_folder):
    root, _ = damaged_folder
    path = root / "validation" / "b" / "img001.png"
    path.write_bytes(b"")
    source = load_source(f"folder:{root}")
    with pytest.raises(DataError) as error:
        image_check.require_decodable(source, "validation")
    assert str(error.value) == (
        f"1 validation image of folder:{root} cannot be read or decoded (first: file {path} "
        "(validation example 3)). Replace the file with a valid image under the same name "
        "(deleting it would renumber the examples, so that the run could not resume); or leave "
        f"them out: llp-check-data --dataset=folder:{root} --write_exclude_list=FILE finds "
        "every bad image, and --exclude_list=FILE leaves them out.")
    image_check.require_decodable(source, "validation", skip=[3])
