"""Labelled sets from lists of image file names (ImageNet's 1% / 10% subsets),
on a faked ImageNet-style image folder and a tiny TFDS set with file names."""

import hashlib
import json
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds
from etils import epath

from llp_tf.data.sources.registry import load_source
from llp_tf.data.splits import label_subsets, regime
from llp_tf.errors import DataError
from tests.data.helpers import encode, random_image

SYNSETS = ("n01440764", "n01443537", "n01484850")
PER_CLASS = 6


def _synset_file(synset, number):
    return f"{synset}_{number}.JPEG"


@pytest.fixture(scope="module")
def imagenet_folder(tmp_path_factory):
    """train/<synset>/<synset>_<n>.JPEG, as ImageNet's training archive unpacks,
    with unordered image numbers; returns the folder."""
    root = tmp_path_factory.mktemp("imagenet")
    rng = np.random.default_rng(0)
    for synset in SYNSETS:
        folder = root / "train" / synset
        folder.mkdir(parents=True)
        for number in rng.choice(20000, PER_CLASS, replace=False):
            (folder / _synset_file(synset, number)).write_bytes(
                encode(random_image(rng, 8, 8), "jpeg"))
    return root


def _write_list(path, names):
    path.write_text("".join(f"{name}\n" for name in names))
    return str(path)


def test_listed_images_are_the_labelled_set(imagenet_folder, tmp_path):
    source = load_source(f"folder:{imagenet_folder}")
    file_names = source.file_names("train")
    assert file_names.shape == (len(SYNSETS) * PER_CLASS,)
    # Index order is the sorted listing: class, then file name.
    paths = source.paths("train")
    assert [os.path.basename(p) for p in paths] == file_names.tolist()
    chosen = [4, 0, 13, 7]  # by index, listed out of order
    listed = [file_names[i] for i in chosen]
    # A path in the list is matched by its file name; blank and comment lines are skipped.
    listed[1] = f"train/{SYNSETS[0]}/{listed[1]}"
    list_path = _write_list(tmp_path / "1percent.txt", ["# the subset", *listed, "", listed[0]])
    labelled, used, path = label_subsets.make_subset_splits(source, list_path, 100)
    assert path == list_path
    np.testing.assert_array_equal(labelled, sorted(chosen))
    np.testing.assert_array_equal(used, np.arange(file_names.size))

    # q = 50%: 3 of 6 per class, the listed ones first, then the lowest indices.
    labelled, used, _ = label_subsets.make_subset_splits(source, list_path, 50)
    np.testing.assert_array_equal(used, [0, 1, 4, 6, 7, 8, 12, 13, 14])
    assert set(labelled) <= set(used)


def test_images_not_in_the_training_data_are_refused(imagenet_folder, tmp_path):
    source = load_source(f"folder:{imagenet_folder}")
    present = source.file_names("train")[2]
    list_path = _write_list(tmp_path / "list.txt",
                            [present, "n09999999_1.JPEG", "n01440764_99999.JPEG"])
    with pytest.raises(DataError) as error:
        label_subsets.make_subset_splits(source, list_path, 100)
    message = str(error.value)
    assert message.startswith(f"2 of the 3 images listed in {list_path} are not in the "
                              f"training split of folder:{imagenet_folder} "
                              "(n09999999_1.JPEG, n01440764_99999.JPEG).")
    assert "\n" not in message


def test_bad_lists(imagenet_folder, tmp_path):
    source = load_source(f"folder:{imagenet_folder}")
    with pytest.raises(DataError, match="names no image"):
        label_subsets.make_subset_splits(source, _write_list(tmp_path / "e.txt", ["# x"]), 100)
    with pytest.raises(DataError, match=r"does not exist.*1percent, 10percent"):
        label_subsets.make_subset_splits(source, str(tmp_path / "missing.txt"), 100)


def test_file_names_must_identify_examples():
    names = np.array(["a.JPEG", "b.JPEG", "a.JPEG"])
    with pytest.raises(DataError, match="match several training examples"):
        label_subsets.labelled_index(["a.JPEG"], names, "list.txt", "data")
    np.testing.assert_array_equal(label_subsets.labelled_index(["b.JPEG"], names, "l", "d"), [1])


def test_sources_without_file_names_say_so(tmp_path):
    from tests.data.helpers import make_tfrecord_set

    make_tfrecord_set(str(tmp_path / "records"))
    source = load_source(f"tfrecord:{tmp_path / 'records'}")
    with pytest.raises(DataError, match="does not record its images' file names"):
        label_subsets.make_subset_splits(source, _write_list(tmp_path / "l.txt", ["x"]), 100)


class _FakeDownloadManager:
    """Stands in for tfds.download.DownloadManager: 'downloads' `CONTENT`."""

    calls = []
    CONTENT = f"{SYNSETS[1]}_1.JPEG\n"

    def __init__(self, download_dir):
        self.download_dir = download_dir

    def download(self, url):
        self.calls.append(url)
        path = os.path.join(self.download_dir, "fetched")
        os.makedirs(self.download_dir, exist_ok=True)
        with open(path, "w") as f:
            f.write(self.CONTENT)
        return epath.Path(path)


def _checksum_of(content):
    return len(content.encode()), hashlib.sha256(content.encode()).hexdigest()


def test_published_checksums_are_the_ones_tfds_records():
    assert label_subsets.published_checksum("1percent") == (
        260323, "71e82a48ba78252683ae334c4d019ebd5c6e855b9599c1389fbe83eb9549cf17")
    assert label_subsets.published_checksum("10percent") == (
        2603168, "6d09de11e7bdaf5b1f3b1f249b6183695f97310cdd20f0c03e7235b6b9392091")


def test_published_lists_are_fetched_once_through_tfds(tmp_path, monkeypatch):
    from llp_tf.data.sources import tfds as tfds_source

    monkeypatch.setattr(tfds_source, "unreachable_host", lambda urls: None)
    monkeypatch.setattr(tfds.download, "DownloadManager", _FakeDownloadManager)
    monkeypatch.setattr(label_subsets, "published_checksum",
                        lambda name: _checksum_of(_FakeDownloadManager.CONTENT))
    _FakeDownloadManager.calls = []
    path = label_subsets.resolve("1percent", data_dir=str(tmp_path))
    assert path == str(tmp_path / "downloads" / "imagenet2012_1percent.txt")
    assert label_subsets.read_list(path) == [f"{SYNSETS[1]}_1.JPEG"]
    assert _FakeDownloadManager.calls == [
        "https://raw.githubusercontent.com/google-research/simclr/master/imagenet_subsets/"
        "1percent.txt"]
    # Kept: the second run needs no network.
    assert label_subsets.resolve("1percent", data_dir=str(tmp_path)) == path
    assert len(_FakeDownloadManager.calls) == 1


def test_a_truncated_published_list_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(tfds.download, "DownloadManager",
                        lambda **_: pytest.fail("downloaded although a copy is kept"))
    kept = tmp_path / "downloads" / "imagenet2012_1percent.txt"
    kept.parent.mkdir()
    kept.write_text("n01440764_10026.JPEG\nn01440764_10027.JPEG\nn014407")
    with pytest.raises(DataError) as error:
        label_subsets.resolve("1percent", data_dir=str(tmp_path))
    message = str(error.value)
    assert message.startswith(f"{kept} is not the published label subset '1percent': it has "
                              "49 bytes (SHA-256 ")
    assert ("TFDS records 260323 bytes (SHA-256 71e82a48ba78252683ae334c4d019ebd5c6e855b9599"
            "c1389fbe83eb9549cf17) for https://raw.githubusercontent.com/") in message
    assert "truncated or damaged: delete it" in message


def test_a_damaged_download_is_refused_and_not_kept(tmp_path, monkeypatch):
    from llp_tf.data.sources import tfds as tfds_source

    monkeypatch.setattr(tfds_source, "unreachable_host", lambda urls: None)
    monkeypatch.setattr(tfds.download, "DownloadManager", _FakeDownloadManager)
    with pytest.raises(DataError, match=r"fetched is not the published label subset '10percent'"):
        label_subsets.resolve("10percent", data_dir=str(tmp_path))
    assert not (tmp_path / "downloads" / "imagenet2012_10percent.txt").exists()


def test_a_list_with_a_byte_order_mark_is_read(imagenet_folder, tmp_path):
    source = load_source(f"folder:{imagenet_folder}")
    names = source.file_names("train")[[3, 5]].tolist()
    path = tmp_path / "windows.txt"
    path.write_text("\ufeff" + "\r\n".join(names) + "\r\n", encoding="utf-8")
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    assert label_subsets.read_list(str(path)) == names
    labelled, _, _ = label_subsets.make_subset_splits(source, str(path), 100)
    np.testing.assert_array_equal(labelled, [3, 5])


def test_published_list_offline_is_a_clear_error(tmp_path, monkeypatch):
    from llp_tf.data.sources import tfds as tfds_source

    monkeypatch.setattr(tfds_source, "unreachable_host",
                        lambda urls: ("raw.githubusercontent.com", OSError("no route")))
    monkeypatch.setattr(tfds.download, "DownloadManager",
                        lambda **_: pytest.fail("downloaded despite an unreachable host"))
    with pytest.raises(DataError) as error:
        label_subsets.resolve("10percent", data_dir=str(tmp_path))
    message = str(error.value)
    assert "Cannot fetch the published label subset '10percent' from https://" in message
    assert "raw.githubusercontent.com cannot be reached (no route)" in message
    assert str(tmp_path / "downloads" / "imagenet2012_10percent.txt") in message


class LlpTestTinyImagenet(tfds.core.GeneratorBasedBuilder):
    """Registered as llp_test_tiny_imagenet: ImageNet's features (image, label,
    file_name) over 5 classes, of which class 4 has no training example."""

    VERSION = tfds.core.Version("1.0.0")
    pkg_dir_path = epath.Path(os.path.dirname(os.path.abspath(__file__)))

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=(8, 8, 3), encoding_format="jpeg"),
                "label": tfds.features.ClassLabel(num_classes=5),
                "file_name": tfds.features.Text()}),
            supervised_keys=("image", "label"))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(12, 0),
                "validation": self._generate_examples(4, 1)}

    def _generate_examples(self, count, seed):
        rng = np.random.default_rng(seed)
        for i in range(count):
            label = i % 4
            name = _synset_file(f"n0{label}", 100 + 7 * i + seed)
            yield name, {"image": random_image(rng, 8, 8), "label": label, "file_name": name}


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("tfds_imagenet"))
    LlpTestTinyImagenet(data_dir=data_dir).download_and_prepare(
        download_config=tfds.download.DownloadConfig(num_shards=2))
    return data_dir


def test_tfds_file_names_follow_the_example_index(tfds_dir, tmp_path):
    source = load_source("tfds:llp_test_tiny_imagenet", data_dir=tfds_dir)
    builder = tfds.builder("llp_test_tiny_imagenet", data_dir=tfds_dir)
    reference = [r["file_name"].decode() for r in
                 builder.as_dataset("train", shuffle_files=False).as_numpy_iterator()]
    assert source.file_names("train").tolist() == reference
    list_path = _write_list(tmp_path / "l.txt", [reference[9], reference[2]])
    labelled, used, _ = label_subsets.make_subset_splits(source, list_path, 100)
    np.testing.assert_array_equal(labelled, [2, 9])
    np.testing.assert_array_equal(used, np.arange(12))
    # Class 4 has no training example: a warning, not an error.
    assert regime.absent_classes_warning(source.train_labels(), 5).startswith(
        "warning: 1 of 5 classes have no training example (classes 4)")


def _subset_run(tfds_dir, tmp_path):
    """(source, list path, config) of a run whose labels are the first 4 training images,
    listed."""
    from tests.runs import tiny_config

    source = load_source("tfds:llp_test_tiny_imagenet", data_dir=tfds_dir)
    names = source.file_names("train")
    list_path = _write_list(tmp_path / "subset.txt", [names[i] for i in (0, 1, 2, 3)])
    config = tiny_config(tmp_path, "tfds:llp_test_tiny_imagenet", data_dir=tfds_dir,
                         label_subset=list_path, global_batch_size=4, warmup_epochs=0,
                         epochs=1)
    return source, list_path, config


def _check_records_then_write_them_as_before(config, source, list_path, lines):
    """Checks a started run's first lines, split and config.json (the list's path and
    SHA-256, no label_percent), then rewrites them as a version before these records did
    (split.npz without them, config.json with the unused label_percent)."""
    assert lines[0].startswith("warning: 1 of 5 classes have no training example (classes 4)")
    assert lines[1] == (f"Labelled set: the 4 images listed in {list_path} "
                        "(--label_percent is not used).")
    split_path = os.path.join(config.run_dir, "split.npz")
    labelled, used = regime.load_splits(split_path, source.train_labels())
    np.testing.assert_array_equal(labelled, [0, 1, 2, 3])
    np.testing.assert_array_equal(used, np.arange(12))
    listed = {"list": list_path, "path": list_path,
              "sha256": hashlib.sha256(open(list_path, "rb").read()).hexdigest()}
    assert regime.read_made_from(split_path) == {"label_subset": listed, "exclude_list": None}
    assert regime.read_split_header(split_path)["label_percent"] is None
    with open(os.path.join(config.run_dir, "config.json")) as f:
        recorded = json.load(f)
    assert recorded["data_files"]["label_subset"] == listed
    assert recorded["data"]["label_percent"] is None
    assert recorded["data"]["label_subset"] == list_path
    regime.save_splits(split_path, labelled, used, source.train_labels(),
                       "tfds:llp_test_tiny_imagenet", 10.0, 100.0, None)
    recorded["data"]["label_percent"] = 10.0
    del recorded["data_files"]
    with open(os.path.join(config.run_dir, "config.json"), "w") as f:
        json.dump(recorded, f)


def test_a_runs_split_and_config_record_its_subset_list(tfds_dir, tmp_path):
    """What a run's start writes (the assembly's `_prepare_run_directory`), without training:
    the listed images are the labelled set, the split and config.json record the list (path
    and SHA-256) and no label_percent; a run directory written before these records (split.npz
    without them, config.json with the unused label_percent) still passes a resume's checks."""
    import io

    from llp_tf.training import assembly, run_record

    source, list_path, config = _subset_run(tfds_dir, tmp_path)
    os.makedirs(config.run_dir)
    log = io.StringIO()
    split = assembly._prepare_run_directory(config, source, log, chief=True, afresh=True)
    np.testing.assert_array_equal(split.labelled_index, [0, 1, 2, 3])
    _check_records_then_write_them_as_before(config, source, list_path,
                                             log.getvalue().splitlines())
    resumed = config.replace(epochs=2)
    run_record.check_resumable(resumed)
    again = assembly._prepare_run_directory(resumed, source, io.StringIO(), chief=True,
                                            afresh=False)
    np.testing.assert_array_equal(again.labelled_index, [0, 1, 2, 3])


# Slow: two runs. make test keeps what the run's start records and a resume's checks of an
# older run directory (above).
@pytest.mark.slow
def test_a_run_takes_its_labels_from_a_subset_list(tfds_dir, tmp_path):
    import io

    from llp_tf.training import run_training

    source, list_path, config = _subset_run(tfds_dir, tmp_path)
    log = io.StringIO()
    final = run_training(config, log)
    assert final["epoch"] == 1 and final["phase"] == "llp"
    # A run directory written before the records still resumes.
    _check_records_then_write_them_as_before(config, source, list_path,
                                             log.getvalue().splitlines())
    final = run_training(config.replace(epochs=2), io.StringIO())
    assert final["epoch"] == 2
