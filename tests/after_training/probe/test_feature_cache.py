import copy
import dataclasses
import io
import json
import os

import numpy as np
import pytest

from llp_tf.data.sources.base import TRAIN, VALIDATION, SourceInfo
from llp_tf.data.sources.registry import load_source
from llp_tf.after_training import features
from llp_tf.after_training.probe import feature_cache, linear_probe
from llp_tf.after_training.probe.readout import ProbeSettings, train_readout
from llp_tf.errors import ConfigError
from tests.after_training.probe_images import centre_crop_features, read_folder_split
from tests.runs import file_contents


@pytest.fixture(scope="module")
def source(stripes):
    return load_source(stripes)


def _cache(run, source, directory, split=TRAIN, **kwargs):
    kwargs.setdefault("batch_size", 48)  # 160 = 3 x 48 + 16: a short last batch
    return feature_cache.cached_features(run.model, source, split, run.config.data.image_size,
                                         str(directory), stream=kwargs.pop("stream", io.StringIO()),
                                         **kwargs)


@pytest.fixture(scope="module")
def built(run, source, tmp_path_factory):
    """(folder, {split: cache}): the train and validation caches of the run's model, built
    once per module in ``folder``'s "train" and "validation"; tests only read them."""
    folder = tmp_path_factory.mktemp("caches")
    return folder, {split: _cache(run, source, folder / split, split=split,
                                  trunk="trained test trunk")
                    for split in (TRAIN, VALIDATION)}


def test_cache_holds_the_models_features_of_each_images_centre_crop(run, source, stripes,
                                                                    built):
    tmp_path, caches = built
    cache = caches[TRAIN]
    images, labels = read_folder_split(stripes, "train")
    expected = centre_crop_features(run.model, images, run.config.data.image_size)
    stored = np.load(tmp_path / "train" / feature_cache.FEATURES_FILE)  # a plain .npy file
    assert stored.dtype == np.float32 and stored.shape == (160, run.model.feature_dim)
    np.testing.assert_allclose(stored, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(cache.labels, labels)
    np.testing.assert_array_equal(cache.index, np.arange(160))
    np.testing.assert_array_equal(cache.features[0:160], stored)
    # The in-memory extraction is the same computation: equal to the bit.
    in_memory = features.extract_features(run.model, source, TRAIN,
                                          run.config.data.image_size, 48, io.StringIO())
    np.testing.assert_array_equal(in_memory.features, stored)
    with open(tmp_path / "train" / feature_cache.MANIFEST_FILE) as f:
        manifest = json.load(f)
    assert (manifest["num_rows"], manifest["feature_dim"], manifest["split"]) == \
        (160, run.model.feature_dim, "train")
    assert manifest["dataset"] == feature_cache.dataset_identity(source.info)
    assert manifest["dataset"]["name"] == source.info.name and manifest["image_size"] == 16
    assert manifest["trunk"] == "trained test trunk"
    assert manifest["weights_sha256"] == feature_cache.weights_fingerprint(run.model)
    assert not cache.reused and not os.path.exists(str(tmp_path / "train") + ".partial")


def test_a_subsample_reads_only_its_images_and_matches_the_full_cache(run, source, tmp_path,
                                                                      built):
    index = features.subsample_index(160, 50, seed=3)
    assert len(index) == 50 and np.all(np.diff(index) > 0)
    np.testing.assert_array_equal(index, features.subsample_index(160, 50, seed=3))
    assert not np.array_equal(index, features.subsample_index(160, 50, seed=4))
    assert features.subsample_index(160, 160, 0) is None
    assert features.subsample_index(160, None, 0) is None
    with pytest.raises(ConfigError, match="positive integer"):
        features.subsample_index(160, 0, 0)
    stream = io.StringIO()
    part = _cache(run, source, tmp_path / "part", index=index, stream=stream)
    full = built[1][TRAIN]
    assert "2/2" in stream.getvalue()  # 50 images: two batches of 48, not four
    np.testing.assert_array_equal(part.index, index)
    np.testing.assert_array_equal(part.labels, full.labels[index])
    np.testing.assert_allclose(part.features[0:50], full.features[index], rtol=1e-6, atol=1e-6)


def test_a_matching_cache_is_reused_and_another_is_a_clear_error(run, source, tmp_path):
    _cache(run, source, tmp_path / "c", split=VALIDATION, trunk="ckpt A")
    stream = io.StringIO()
    again = _cache(run, source, tmp_path / "c", split=VALIDATION, stream=stream)
    assert again.reused and stream.getvalue() == ""  # nothing recomputed
    other = linear_probe.random_trunk_model(run.config, run.num_classes, seed=0)
    with pytest.raises(ConfigError, match=r"made by ckpt A.*weights_sha256.*--noreuse_cache"):
        feature_cache.cached_features(other, source, VALIDATION, 16, str(tmp_path / "c"),
                                      trunk="random", stream=io.StringIO())
    with pytest.raises(ConfigError, match="index_sha256|num_rows"):
        _cache(run, source, tmp_path / "c", split=VALIDATION,
               index=features.subsample_index(40, 10, 0))
    rebuilt = feature_cache.cached_features(other, source, VALIDATION, 16,
                                            str(tmp_path / "c"), reuse=False,
                                            stream=io.StringIO())
    assert not rebuilt.reused
    assert rebuilt.manifest["weights_sha256"] == feature_cache.weights_fingerprint(other)


def test_a_crashed_build_leaves_no_cache_that_looks_complete(run, source, tmp_path,
                                                             monkeypatch):
    real = feature_cache.output_batches

    def crash_after_one_batch(*args, **kwargs):
        batches = real(*args, **kwargs)
        yield next(batches)
        raise KeyboardInterrupt

    monkeypatch.setattr(feature_cache, "output_batches", crash_after_one_batch)
    with pytest.raises(KeyboardInterrupt):
        _cache(run, source, tmp_path / "c", split=VALIDATION)
    assert not os.path.exists(tmp_path / "c") and os.path.isdir(str(tmp_path / "c") + ".partial")
    monkeypatch.setattr(feature_cache, "output_batches", real)
    cache = _cache(run, source, tmp_path / "c", split=VALIDATION)
    assert not cache.reused and len(cache.labels) == 40
    assert not os.path.exists(str(tmp_path / "c") + ".partial")


@pytest.mark.parametrize("where, held", [
    ("c", "notes.txt, which a feature cache does not"),
    ("c", "no manifest.json"),
    ("c.partial", "notes.txt, which a feature cache does not"),
])
def test_a_rebuild_replaces_no_folder_but_a_caches_and_keeps_it(run, source, tmp_path,
                                                                 where, held):
    folder = tmp_path / where
    folder.mkdir()
    (folder / feature_cache.FEATURES_FILE).write_bytes(b"not ours")
    if "notes" in held:
        (folder / "notes.txt").write_text("mine")
    before = file_contents(folder)
    with pytest.raises(ConfigError) as error:
        _cache(run, source, tmp_path / "c", split=VALIDATION, reuse=False)
    assert str(error.value) == (f"{folder} holds {held}, so the probe does not replace it: "
                                "move it away or give another --cache_dir.")
    assert file_contents(folder) == before
    assert sorted(os.listdir(tmp_path)) == [where]


@pytest.mark.parametrize("standardize", [False, True])
def test_readout_from_the_cache_equals_the_readout_from_arrays(built, standardize):
    folder, caches = built
    train, validation = (caches[split].feature_set() for split in (TRAIN, VALIDATION))
    arrays = [features.FeatureSet(np.load(folder / name / "features.npy"), s.labels, s.index)
              for name, s in ((TRAIN, train), (VALIDATION, validation))]
    settings = ProbeSettings(epochs=3, batch_size=32, learning_rate=0.05,
                             standardize=standardize)
    from_cache, cached = train_readout(train, validation, 4, settings, io.StringIO())
    from_arrays, in_memory = train_readout(*arrays, 4, settings, io.StringIO())
    for ours, theirs in zip(from_cache.weights(), from_arrays.weights()):
        np.testing.assert_array_equal(ours, theirs)
    assert cached.history == in_memory.history and cached.loss == in_memory.loss
    assert np.abs(from_cache.weights()[0]).max() > 0  # it did train


def test_a_cache_being_built_by_another_process_is_a_clear_error(run, source, tmp_path):
    import fcntl
    directory = tmp_path / "train"
    # flock conflicts between two open files even within one process.
    fd = os.open(str(directory) + feature_cache.LOCK_SUFFIX, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(ConfigError, match="Another process is building the feature cache"):
            _cache(run, source, directory)
        assert not directory.exists()
    finally:
        os.close(fd)
    cache = _cache(run, source, directory)  # once released, the build goes ahead
    assert cache.features.shape[0] == 160 and not cache.reused
    assert not os.path.exists(str(directory) + feature_cache.LOCK_SUFFIX)


def test_a_datasets_identity_is_its_absolute_path_sizes_and_class_names(tmp_path, monkeypatch):
    info = SourceInfo("folder:scenes", 2, ("a", "b"), 10, 4, None, 3)
    monkeypatch.chdir(tmp_path)
    identity = feature_cache.dataset_identity(info)
    assert identity["name"] == f"folder:{tmp_path / 'scenes'}"
    assert identity == feature_cache.dataset_identity(
        dataclasses.replace(info, name=f"folder:{tmp_path / 'x' / '..' / 'scenes'}"))
    assert feature_cache.dataset_identity(dataclasses.replace(info, name="tfds:scenes"))[
        "name"] == "tfds:scenes"
    for other in (dict(name="folder:/elsewhere/scenes"), dict(num_train=11),
                  dict(num_validation=5), dict(class_names=("a", "c"))):
        assert feature_cache.dataset_identity(dataclasses.replace(info, **other)) != identity


def test_a_cache_of_another_dataset_names_the_dataset_not_the_same_trunk_twice(
        run, source, tmp_path):
    _cache(run, source, tmp_path / "c", split=VALIDATION, trunk="ckpt A")
    renamed = copy.copy(source)
    renamed.info = dataclasses.replace(source.info, name="folder:/elsewhere/stripes")
    with pytest.raises(ConfigError) as error:
        _cache(run, renamed, tmp_path / "c", split=VALIDATION, trunk="ckpt A")
    message = str(error.value)
    assert "made by" not in message and "/elsewhere/stripes" in message
    assert message.startswith(f"The feature cache {tmp_path / 'c'} does not hold the features "
                              "asked for: dataset {")
