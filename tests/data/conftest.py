"""Fixtures of the data tests."""

import pytest


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
    from llp_tf.data import load_source

    return load_source("mnist5k", data_dir=tfds_dir)
