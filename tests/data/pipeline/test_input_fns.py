"""Input pipelines: one epoch of distinct indices, determinism, replicas, resume,
q-subsets, evaluation coverage, bad input."""

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data.augmentation import eval_transform, weak
from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.pipeline import input_fns
from llp_tf.data.sources.registry import load_source
from llp_tf.errors import ConfigError, DataError
from tests.data.helpers import all_labelled, write_image_folder

SIZE = 8


def _sources(slow):
    """`source`'s two kinds for a test, ``slow`` left to make test-all: the pipeline's code
    after the read is the same for both (make test keeps each test on one kind, and each
    kind's reads in the tests that take both)."""
    return [pytest.param(kind, marks=pytest.mark.slow) if kind == slow else kind
            for kind in ("folder", "tfrecord")]


def _collect(dataset):
    """Concatenates every field of a dataset of batches into numpy arrays."""
    batches = list(dataset.as_numpy_iterator())
    return {key: np.concatenate([b[key] for b in batches]) for key in batches[0]}


def _epoch(source, batch, **kwargs):
    kwargs.setdefault("seed", 3)
    kwargs.setdefault("epoch", 0)
    kwargs.setdefault("labelled_index", all_labelled(source))
    with data_errors():
        return _collect(input_fns.make_train_input_fn(source, batch, SIZE, **kwargs)(None))


@pytest.fixture(scope="module")
def shared_epoch():
    """``shared_epoch(source, batch)``: `_epoch(source, batch)` with its defaults, read once
    per module for the tests that check it (do not change its arrays)."""
    epochs = {}

    def shared(source, batch):
        key = (source.info.name, batch)
        if key not in epochs:
            epochs[key] = _epoch(source, batch)
        return epochs[key]

    return shared


@pytest.mark.parametrize("source", _sources(slow="folder"), indirect=True)
def test_only_labelled_examples_carry_their_label(source):
    n = source.info.num_train
    labelled = np.arange(0, n, 3)
    used = np.arange(1, n)  # the bank's rows: "index" is the position in used_index
    out = _epoch(source, 6, labelled_index=labelled, used_index=used)
    original = used[out["index"]]
    is_labelled = np.isin(original, labelled)
    assert 0 < is_labelled.sum() < len(original)
    np.testing.assert_array_equal(
        out["label"], np.where(is_labelled, source.train_labels()[original], -1))
    assert input_fns.UNLABELLED == -1


def test_one_epoch_of_distinct_examples(source, shared_epoch):
    n = source.info.num_train
    out = shared_epoch(source, 6)
    steps = n // 6
    assert input_fns.steps_per_epoch(n, 6) == steps
    assert out["image"].shape == (steps * 6, SIZE, SIZE, 3) and out["image"].dtype == np.float32
    assert out["index"].dtype == np.int64 and out["label"].dtype == np.int64
    assert len(set(out["index"].tolist())) == steps * 6
    assert out["index"].min() >= 0 and out["index"].max() < n
    np.testing.assert_array_equal(out["label"], source.train_labels()[out["index"]])
    low = (0 - np.array(weak.IMAGENET_MEAN)) / weak.IMAGENET_STD
    high = (1 - np.array(weak.IMAGENET_MEAN)) / weak.IMAGENET_STD
    assert np.all(out["image"] >= low - 1e-5) and np.all(out["image"] <= high + 1e-5)


# make test keeps the TFRecords' four shards read in parallel; the folder's reads are
# test_one_epoch_of_distinct_examples's.
@pytest.mark.parametrize("source", _sources(slow="folder"), indirect=True)
def test_same_seed_and_epoch_same_batches(source):
    first = _epoch(source, 6, shuffle_block=5)
    again = _epoch(source, 6, shuffle_block=5)
    np.testing.assert_array_equal(first["index"], again["index"])
    np.testing.assert_array_equal(first["image"], again["image"])


def test_order_depends_on_seed_and_epoch(tfrecord_source, shared_epoch):
    base = shared_epoch(tfrecord_source, 4)["index"]
    assert not np.array_equal(base, _epoch(tfrecord_source, 4, epoch=1)["index"])
    assert not np.array_equal(base, _epoch(tfrecord_source, 4, seed=4)["index"])


@pytest.mark.parametrize("source", _sources(slow="tfrecord"), indirect=True)
def test_two_replicas_see_the_single_replica_global_batches(source, two_replica_strategy,
                                                           shared_epoch):
    single = shared_epoch(source, 6)
    input_fn = input_fns.make_train_input_fn(source, 6, SIZE, seed=3, epoch=0,
                                            labelled_index=all_labelled(source))
    distributed = two_replica_strategy.distribute_datasets_from_function(input_fn)
    steps = []
    with data_errors():
        for element in distributed:
            parts = {key: [t.numpy() for t in two_replica_strategy.experimental_local_results(v)]
                     for key, v in element.items()}
            assert [p.shape[0] for p in parts["index"]] == [3, 3]
            steps.append({key: np.concatenate(v) for key, v in parts.items()})
    assert len(steps) == source.info.num_train // 6
    for key in ("index", "label"):
        np.testing.assert_array_equal(np.concatenate([s[key] for s in steps]), single[key])
    np.testing.assert_allclose(np.concatenate([s["image"] for s in steps]), single["image"],
                               atol=1e-6)


def test_two_workers_split_each_global_batch(tfrecord_source):
    single = _epoch(tfrecord_source, 8)
    parts = []
    for worker in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=worker,
                                             num_replicas_in_sync=4)
        fn = input_fns.make_train_input_fn(tfrecord_source, 8, SIZE, seed=3, epoch=0,
                                          labelled_index=all_labelled(tfrecord_source))
        parts.append([b["index"] for b in fn(context).as_numpy_iterator()])
    # Each worker's replicas get two batches of 2 per step: worker 0 then worker 1.
    steps = len(single["index"]) // 8
    assert all(len(p) == 2 * steps for p in parts)
    rebuilt = np.concatenate([np.concatenate(parts[0][2 * s:2 * s + 2] + parts[1][2 * s:2 * s + 2])
                              for s in range(steps)])
    np.testing.assert_array_equal(rebuilt, single["index"])


@pytest.mark.parametrize("source", _sources(slow="folder"), indirect=True)
def test_resume_mid_epoch(source, shared_epoch):
    full = shared_epoch(source, 4)
    resumed = _epoch(source, 4, start_step=3)
    np.testing.assert_array_equal(resumed["index"], full["index"][12:])
    np.testing.assert_array_equal(resumed["image"], full["image"][12:])


def test_used_index_remaps_densely(tfrecord_source):
    labels = tfrecord_source.train_labels()
    used = np.array([0, 2, 3, 5, 8, 13, 17, 21, 22, 27, 28], np.int64)
    out = _epoch(tfrecord_source, 5, used_index=used)
    assert len(out["index"]) == 10 and len(set(out["index"].tolist())) == 10
    assert out["index"].min() >= 0 and out["index"].max() < used.size
    np.testing.assert_array_equal(out["label"], labels[used[out["index"]]])
    # The augmentation of an example depends on its original index only.
    full = _epoch(tfrecord_source, 1)
    position = {int(i): k for k, i in enumerate(full["index"])}
    for k, dense in enumerate(out["index"]):
        np.testing.assert_array_equal(out["image"][k], full["image"][position[int(used[dense])]])


@pytest.mark.parametrize("replicas", [1, 2])
def test_eval_counts_every_example_once(source, replicas, two_replica_strategy):
    n = source.info.num_validation
    input_fn = input_fns.make_eval_input_fn(source, 4, SIZE)
    if replicas == 1:
        with data_errors():
            out = _collect(input_fn(None))
    else:
        strategy = two_replica_strategy
        merged = []
        with data_errors():
            for element in strategy.distribute_datasets_from_function(input_fn):
                merged.append({k: np.concatenate([t.numpy() for t in
                                                  strategy.experimental_local_results(v)])
                               for k, v in element.items()})
        out = {k: np.concatenate([m[k] for m in merged]) for k in merged[0]}
    steps = input_fns.eval_steps(n, 4)
    assert out["image"].shape == (steps * 4, SIZE, SIZE, 3)
    assert out["mask"].dtype == bool and out["mask"].sum() == n
    assert sorted(out["index"][out["mask"]].tolist()) == list(range(n))
    np.testing.assert_array_equal(out["label"][out["mask"]],
                                  source.validation_labels()[out["index"][out["mask"]]])


def test_eval_images_are_the_eval_transform_of_the_raw_images(folder_source):
    with data_errors():
        raw = {int(e["index"]): e["image"]
               for e in folder_source.raw_dataset("validation").as_numpy_iterator()}
        out = _collect(input_fns.make_eval_input_fn(folder_source, 4, SIZE)(None))
    for k in np.flatnonzero(out["mask"]):
        expected = eval_transform.eval_preprocess(tf.constant(raw[int(out["index"][k])]), SIZE)
        np.testing.assert_allclose(out["image"][k], expected.numpy(), atol=1e-6)


def test_batch_must_split_over_replicas(folder_source, two_replica_strategy):
    input_fn = input_fns.make_train_input_fn(folder_source, 5, SIZE, seed=0, epoch=0,
                                            labelled_index=all_labelled(folder_source))
    with pytest.raises(ConfigError, match="does not split evenly over 2 replicas"):
        two_replica_strategy.distribute_datasets_from_function(input_fn)


def test_bad_settings(folder_source):
    with pytest.raises(ConfigError, match="larger than the 27 training examples"):
        input_fns.make_train_input_fn(folder_source, 28, SIZE, seed=0, epoch=0,
                                     labelled_index=all_labelled(folder_source))
    with pytest.raises(ConfigError, match=r"start_step must lie in \[0, 6\]"):
        input_fns.make_train_input_fn(folder_source, 4, SIZE, seed=0, epoch=0, start_step=7,
                                     labelled_index=all_labelled(folder_source))
    with pytest.raises(ConfigError, match="seed must be an integer >= 0"):
        input_fns.make_train_input_fn(folder_source, 4, SIZE, seed=-1, epoch=0,
                                     labelled_index=all_labelled(folder_source))
    with pytest.raises(DataError, match="used_index must be sorted"):
        input_fns.make_train_input_fn(folder_source, 2, SIZE, seed=0, epoch=0,
                                     used_index=np.array([3, 1, 2]),
                                     labelled_index=all_labelled(folder_source))(None)


def test_corrupt_image_during_training_names_the_file(tmp_path):
    written = write_image_folder(str(tmp_path), {"a": 4, "b": 4})
    with open(written[5][0], "wb") as f:
        f.write(written[5][2][:40])
    source = load_source(f"folder:{tmp_path}")
    with pytest.raises(DataError, match=f"image of file {written[5][0]} \\(train example 5\\): "):
        _epoch(source, 8)


def test_eval_leaves_out_excluded_examples_unread(tmp_path):
    write_image_folder(str(tmp_path / "train"), {"a": 2, "b": 2})
    written = write_image_folder(str(tmp_path / "validation"), {"a": 4, "b": 3}, seed=1)
    with open(written[2][0], "wb") as f:
        f.write(b"not an image")
    source = load_source(f"folder:{tmp_path}")
    with data_errors():
        out = _collect(input_fns.make_eval_input_fn(source, 4, SIZE,
                                                   excluded_index=np.array([2, 5]))(None))
    assert out["mask"].shape == (input_fns.eval_steps(5, 4) * 4,)
    assert sorted(out["index"][out["mask"]].tolist()) == [0, 1, 3, 4, 6]


def test_embedded_regime_subset(mnist5k):
    from llp_tf.data.splits import regime

    labels = mnist5k.train_labels()
    labelled, used = regime.make_splits(labels, 1, 10)
    out = _epoch(mnist5k, 50, used_index=used)
    assert len(out["index"]) == 400 and len(set(out["index"].tolist())) == 400
    np.testing.assert_array_equal(out["label"], labels[used[out["index"]]])
    np.testing.assert_array_equal(np.bincount(out["label"]), [40] * 10)


def test_steps_beyond_one_pass_start_new_passes(folder_source, shared_epoch):
    # 27 examples, G = 6: 4 batches per pass; 10 steps = 2 whole passes + 2 batches.
    out = _epoch(folder_source, 6, steps=10)
    index = out["index"].reshape(10, 6)
    assert all(len(set(batch.tolist())) == 6 for batch in index)
    passes = [index[:4].ravel(), index[4:8].ravel(), index[8:].ravel()]
    assert all(len(set(p.tolist())) == p.size for p in passes)
    np.testing.assert_array_equal(passes[0], shared_epoch(folder_source, 6)["index"])
    assert not np.array_equal(passes[0], passes[1])
    np.testing.assert_array_equal(out["label"], folder_source.train_labels()[out["index"]])
    # An example's augmentation differs between passes.
    first = {int(i): k for k, i in enumerate(passes[0])}
    k = next(k for k, i in enumerate(passes[1]) if int(i) in first)
    assert not np.allclose(out["image"][24 + k], out["image"][first[int(passes[1][k])]])
    # Resuming inside the second pass, and fewer steps than a pass.
    np.testing.assert_array_equal(_epoch(folder_source, 6, steps=10, start_step=5)["image"],
                                  out["image"][30:])
    np.testing.assert_array_equal(_epoch(folder_source, 6, steps=3)["index"], out["index"][:18])
    input_fn = input_fns.make_train_input_fn(folder_source, 6, SIZE, seed=3, epoch=0, steps=10,
                                            start_step=10,
                                            labelled_index=all_labelled(folder_source))
    assert len(list(input_fn(None))) == 0


def test_batches_cross_passes_trains_a_set_smaller_than_a_batch(folder_source):
    # Only 4 used examples, G = 6: every pass holds all 4, passes run into each
    # other, and batches hold repeats.
    used = np.array([1, 5, 8, 20])
    out = _epoch(folder_source, 6, steps=5, used_index=used, batches_cross_passes=True)
    index = out["index"]
    assert index.size == 30
    for p in range(7):  # 30 records = 7 whole passes of 4 and 2 more
        chunk = index[4 * p:4 * p + 4]
        np.testing.assert_array_equal(np.sort(chunk), np.arange(4))
    np.testing.assert_array_equal(out["label"], folder_source.train_labels()[used[index]])
    resumed = _epoch(folder_source, 6, steps=5, start_step=3, used_index=used,
                     batches_cross_passes=True)
    np.testing.assert_array_equal(resumed["image"], out["image"][18:])
    with pytest.raises(ConfigError, match="larger than"):
        _epoch(folder_source, 6, steps=5, used_index=used)


class _CountingReads:
    """Wraps a source so that every record read from a training shard is counted."""

    def __init__(self, source):
        self._source = source
        self.reads = 0

    def __getattr__(self, name):
        return getattr(self._source, name)

    def read_shard(self, split, shard):
        def count(record):
            def tick(index):
                self.reads += 1
                return index
            index = tf.py_function(tick, [record["index"]], tf.int64)
            index.set_shape([])
            return dict(record, index=index)
        return self._source.read_shard(split, shard).map(count)


# make test keeps each kind of source once and each start once.
@pytest.mark.parametrize("source, start_step", [
    ("folder", 0), pytest.param("folder", 3, marks=pytest.mark.slow),
    pytest.param("tfrecord", 0, marks=pytest.mark.slow), ("tfrecord", 3)], indirect=["source"])
def test_cached_passes_read_the_split_once_and_permute_each_pass(source, start_step):
    used = np.array([1, 5, 8, 20])
    n = source.info.num_train
    counting = _CountingReads(source)
    out = _epoch(counting, 6, steps=5, start_step=start_step, used_index=used,
                 batches_cross_passes=True, cache_passes=True)
    # One read of the split per epoch, not one per pass.
    assert counting.reads == n
    if start_step:
        whole = _epoch(source, 6, steps=5, used_index=used, batches_cross_passes=True,
                       cache_passes=True)
        np.testing.assert_array_equal(out["image"], whole["image"][6 * start_step:])
        return
    index = out["index"]
    passes = [index[4 * p:4 * p + 4] for p in range(7)]
    for chunk in passes:
        np.testing.assert_array_equal(np.sort(chunk), np.arange(4))
    assert len({tuple(chunk) for chunk in passes}) > 1  # each pass has its own order
    np.testing.assert_array_equal(out["label"], source.train_labels()[used[index]])
    uncached = _CountingReads(source)
    _epoch(uncached, 6, steps=5, used_index=used, batches_cross_passes=True)
    assert uncached.reads >= 7 * n


def test_min_crop_area_reaches_the_augmentation(folder_source):
    with data_errors():
        raw = {int(e["index"]): e["image"]
               for e in folder_source.raw_dataset("train").as_numpy_iterator()}
        out = _epoch(folder_source, 3, augmentation="light", min_crop_area=1.0)
    # A crop of the whole area of a 10-wide image 12-14 high, with an aspect
    # ratio of 3/4-4/3, fits only as a full-width band (the default crops,
    # of 20-100% of the area, are mostly narrower).
    for k, index in enumerate(out["index"]):
        image = tf.constant(raw[int(index)])
        height = image.shape[0]
        # Resized to 8-bit levels (round half to even, as tf.round), then normalised: the
        # bands of each height h resized together (each alone, as a batch's images are).
        bands = np.concatenate([weak.normalize(np.clip(np.round(tf.image.resize(
            tf.stack([image[top:top + h] for top in range(height - h + 1)]), [SIZE, SIZE],
            antialias=True).numpy()), 0, 255) / 255.0).numpy() for h in range(1, height + 1)])
        assert np.abs(out["image"][k] - bands).max(axis=(1, 2, 3)).min() < 1e-5
    with pytest.raises(ConfigError, match="min_crop_area must lie in"):
        input_fns.make_train_input_fn(folder_source, 3, SIZE, seed=0, epoch=0,
                                     min_crop_area=0.0, labelled_index=all_labelled(folder_source))
