"""Fixtures of the data tests."""

import pytest

from tests.data.helpers import make_tfrecord_set, write_image_folder


@pytest.fixture(autouse=True)
def _scan_cache_in_tmp(tmp_path, monkeypatch):
    """Keeps scan caches out of the home folder."""
    monkeypatch.setenv("LLP_TF_CACHE_DIR", str(tmp_path / "llp_cache"))


@pytest.fixture(scope="session")
def tfds_dir(tmp_path_factory):
    """One TFDS data_dir shared by the session (embedded sets prepared once)."""
    return str(tmp_path_factory.mktemp("tfds"))


@pytest.fixture(scope="session")
def mnist5k(tfds_dir):
    from llp_tf.data.sources.registry import load_source

    return load_source("mnist5k", data_dir=tfds_dir)


@pytest.fixture(scope="module")
def folder_source(tmp_path_factory):
    """An image folder of 27 training (classes a, b, c: 9, 8, 10) and 11 validation images."""
    from llp_tf.data.sources.registry import load_source

    root = tmp_path_factory.mktemp("folder")
    write_image_folder(str(root / "train"), {"a": 9, "b": 8, "c": 10}, grayscale_every=5)
    write_image_folder(str(root / "validation"), {"a": 4, "b": 3, "c": 4}, seed=1)
    return load_source(f"folder:{root}")


@pytest.fixture(scope="module")
def tfrecord_source(tmp_path_factory):
    """TFRecord shards of 29 training (4 shards) and 11 validation examples, 3 classes."""
    from llp_tf.data.sources.registry import load_source

    root = tmp_path_factory.mktemp("tfrecord")
    make_tfrecord_set(str(root), num_train=29, num_validation=11, num_shards=4)
    return load_source(f"tfrecord:{root}")


@pytest.fixture(params=["folder", "tfrecord"])
def source(request, folder_source, tfrecord_source):
    """Each of `folder_source` and `tfrecord_source` in turn."""
    return {"folder": folder_source, "tfrecord": tfrecord_source}[request.param]
