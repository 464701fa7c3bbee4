"""TFDS by name, exercised offline with a tiny builder prepared in a tmp data_dir."""

import os

import numpy as np
import pytest
import tensorflow_datasets as tfds
from etils import epath

from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.sources import tfds as tfds_source
from llp_tf.data.sources.registry import load_source
from llp_tf.errors import DataError

NUM_TRAIN, NUM_TEST = 23, 6


class LlpTestTinyImages(tfds.core.GeneratorBasedBuilder):
    """Registered under the name llp_test_tiny_images; 4 classes, 10x12 RGB JPEGs."""

    VERSION = tfds.core.Version("1.0.0")
    pkg_dir_path = epath.Path(os.path.dirname(os.path.abspath(__file__)))

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=(10, 12, 3), encoding_format="jpeg"),
                "label": tfds.features.ClassLabel(names=["w", "x", "y", "z"]),
                "note": tfds.features.Text()}),
            supervised_keys=("image", "label"))

    def _split_generators(self, dl_manager):
        # A "test" split, no "validation": the source must take "test".
        return {"train": self._generate_examples(NUM_TRAIN, 0),
                "test": self._generate_examples(NUM_TEST, 1)}

    def _generate_examples(self, count, seed):
        rng = np.random.default_rng(seed)
        for i in range(count):
            image = rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)
            yield f"{seed}-{i}", {"image": image, "label": (i * 7) % 4, "note": str(i)}


@pytest.fixture(scope="module")
def prepared_dir(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("tfds_tiny"))
    builder = LlpTestTinyImages(data_dir=data_dir)
    # Several shards, so that indices must run across shard boundaries.
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=3))
    return data_dir


def test_source_by_name_matches_tfds(prepared_dir):
    source = load_source("tfds:llp_test_tiny_images", data_dir=prepared_dir)
    info = source.info
    assert info.name == "tfds:llp_test_tiny_images"
    assert (info.num_train, info.num_validation, info.num_classes) == (NUM_TRAIN, NUM_TEST, 4)
    assert info.class_names == ("w", "x", "y", "z")
    assert info.image_size == (10, 12) and info.channels == 3
    assert source.num_shards("train") == 3

    builder = tfds.builder("llp_test_tiny_images", data_dir=prepared_dir)
    for split, tfds_split in (("train", "train"), ("validation", "test")):
        # TFDS reads shards in order when not shuffling: its i-th example is index i.
        reference = list(builder.as_dataset(tfds_split, shuffle_files=False).as_numpy_iterator())
        np.testing.assert_array_equal(source.labels(split), [r["label"] for r in reference])
        with data_errors():
            examples = list(source.raw_dataset(split).as_numpy_iterator())
        assert [int(e["index"]) for e in examples] == list(range(len(reference)))
        for example, ref in zip(examples, reference):
            assert example["label"] == ref["label"]
            np.testing.assert_array_equal(example["image"], ref["image"])


def test_prepares_when_needed(tmp_path):
    source = load_source("tfds:llp_test_tiny_images", data_dir=str(tmp_path))
    assert source.info.num_train == NUM_TRAIN
    assert os.path.isdir(tmp_path / "llp_test_tiny_images" / "1.0.0")


def test_unknown_name():
    with pytest.raises(DataError) as error:
        load_source("tfds:no_such_dataset_llp")
    message = str(error.value)
    assert "TFDS has no dataset named 'no_such_dataset_llp'" in message
    assert '"tfrecord:<folder>"' in message and "\n" not in message


def test_incomplete_prepared_files(prepared_dir, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(prepared_dir, copy)
    shard = next((copy / "llp_test_tiny_images" / "1.0.0").glob("*train.tfrecord-00001-*"))
    shard.write_bytes(b"")
    with pytest.raises(DataError, match=r"the shards hold \[\d+, 0, \d+\] records"):
        load_source("tfds:llp_test_tiny_images", data_dir=str(copy))


class LlpTestRemoteImages(LlpTestTinyImages):
    """The tiny builder, as if it downloaded from two hosts first."""

    @property
    def url_infos(self):
        return {"https://files.example.org/a.tar": None,
                "http://mirror.example.net:8080/b.tar": None,
                "https://files.example.org/c.tar": None}


def test_download_hosts():
    builder = LlpTestRemoteImages(data_dir="/nonexistent")
    assert tfds_source.download_hosts(builder) == [("files.example.org", 443),
                                                   ("mirror.example.net", 8080)]


def _no_proxy(monkeypatch):
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)


def test_unreachable_host_fails_before_downloading(tmp_path, monkeypatch):
    _no_proxy(monkeypatch)
    tried = []

    def refuse(address, timeout):
        tried.append((address, timeout))
        raise OSError("Name or service not known")

    monkeypatch.setattr(tfds_source.socket, "create_connection", refuse)
    builder = LlpTestRemoteImages(data_dir=str(tmp_path))
    monkeypatch.setattr(builder, "download_and_prepare",
                        lambda **_: pytest.fail("downloaded despite an unreachable host"))
    with pytest.raises(DataError) as error:
        tfds_source.prepare(builder)
    message = str(error.value)
    assert "downloads from files.example.org, which cannot be reached" in message
    assert "Name or service not known" in message and "\n" not in message
    assert tried == [(("files.example.org", 443), tfds_source.REACHABILITY_TIMEOUT_SECONDS)]


class _Connection:
    def close(self):
        pass


def test_reachable_hosts_then_prepare(tmp_path, monkeypatch):
    _no_proxy(monkeypatch)
    tried = []
    monkeypatch.setattr(tfds_source.socket, "create_connection",
                        lambda address, timeout: tried.append(address) or _Connection())
    builder = LlpTestRemoteImages(data_dir=str(tmp_path))
    tfds_source.prepare(builder)
    assert tried == [("files.example.org", 443), ("mirror.example.net", 8080)]
    assert builder.is_prepared()


def test_behind_a_proxy_the_check_is_left_to_tfds(tmp_path, monkeypatch):
    _no_proxy(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setattr(tfds_source.socket, "create_connection",
                        lambda *_, **__: pytest.fail("connected directly behind a proxy"))
    builder = LlpTestRemoteImages(data_dir=str(tmp_path))
    tfds_source.prepare(builder)
    assert builder.is_prepared()


@pytest.mark.parametrize("make_folder", [False, True])
def test_manual_download_error_shows_the_whole_instruction(tmp_path, make_folder):
    manual_dir = tmp_path / "downloads" / "manual"
    if make_folder:
        manual_dir.mkdir(parents=True)
    with pytest.raises(DataError) as error:
        load_source("tfds:imagenet2012", data_dir=str(tmp_path))
    message = str(error.value)
    assert "\n" not in message
    assert f"its manual folder {manual_dir} {'is empty' if make_folder else 'does not exist'}" \
        in message
    # TFDS's instruction in full, the two archives included.
    assert "ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar" in message
    assert "image-net.org" in message
    assert not (tmp_path / "imagenet2012").exists()


def test_a_failed_prepare_reports_every_line_of_tfds_error(tmp_path, monkeypatch):
    _no_proxy(monkeypatch)
    builder = LlpTestTinyImages(data_dir=str(tmp_path))

    def fail(**_):
        raise RuntimeError("first line\nsecond line names the fix")

    monkeypatch.setattr(builder, "download_and_prepare", fail)
    with pytest.raises(DataError) as error:
        tfds_source.prepare(builder)
    assert "first line second line names the fix" in str(error.value)
