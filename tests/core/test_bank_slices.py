"""Sliced checkpoints of the sharded bank (`bank_slices`): each shard saves its rows as slices
of the replicated bank's keys and restores only the rows it owns, at any shard count; the
replicated `MemoryBank` restores the whole keys, and a sharded bank restores its slices of the
replicated bank's whole keys. Banks are filled with random state, so a restore must give it
back bit for bit. No collective runs: the strategies only name each shard count's devices."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.checkpoint import functional_saver

from llp_tf.core import bank_slices
from llp_tf.core.memory_bank import MemoryBank
from llp_tf.core.sharded_bank import ShardedMemoryBank

N, D, C = 13, 8, 3
# Sorted; over 3 shards ([0, 5), [5, 9), [9, 13)) the middle one has no labelled row.
LABELLED = np.array([1, 2, 9, 11, 12])
LABELLED_CLASSES = np.array([0, 1, 2, 0, 1])
ROW_STATE = ("embeddings", "labels", "confidence", "is_labelled")
STATE = ROW_STATE + ("density", "labelled_index")
KEY = "bank/{}/.ATTRIBUTES/VARIABLE_VALUE"


@pytest.fixture
def make(two_replica_strategy, four_replica_strategy):
    """make(shards, seed=0) -> a sharded bank over ``shards`` devices (1 to 4), or the
    replicated bank for None."""
    base = tf.distribute.MirroredStrategy._collective_key_base
    # Three devices: a strategy of its own, its collective keys apart from the fixtures'.
    tf.distribute.MirroredStrategy._collective_key_base = base + 200_000
    try:
        three = tf.distribute.MirroredStrategy(
            [d.name for d in tf.config.list_logical_devices("CPU")[:3]])
    finally:
        tf.distribute.MirroredStrategy._collective_key_base = base
    strategies = {1: tf.distribute.get_strategy(), 2: two_replica_strategy, 3: three,
                  4: four_replica_strategy}

    def bank(shards, seed=0, num_examples=N, labelled=LABELLED, classes=LABELLED_CLASSES):
        split = (num_examples, D, C, labelled, classes)
        if shards is None:
            return MemoryBank(*split, seed=seed)
        return ShardedMemoryBank(strategies[shards], *split, seed=seed)
    return bank


def _random_state(seed):
    rng = np.random.default_rng(seed)
    return {"embeddings": rng.normal(size=(N, D)).astype(np.float32),
            "labels": rng.integers(0, 1000, N).astype(np.int64),
            "confidence": rng.uniform(size=N).astype(np.float32),
            "is_labelled": rng.uniform(size=N) < 0.5,
            "density": rng.uniform(1, 5, len(LABELLED)).astype(np.float32),
            "labelled_index": np.sort(LABELLED)}


def _fill(bank, state):
    """Writes ``state`` into ``bank``'s variables (each shard its rows)."""
    if isinstance(bank, MemoryBank):
        for name in STATE:
            getattr(bank, name).assign(state[name])
        return
    for shard in bank.shards:
        for name in ROW_STATE:
            getattr(shard, name).assign(state[name][shard.start:shard.stop])
        shard.density.assign(state["density"][shard.labelled_start:shard.labelled_stop])


def _state(bank):
    return {name: getattr(bank, name).numpy() for name in STATE}


def _saved(bank, tmp_path, seed=5):
    """(checkpoint path, state) of ``bank`` filled with a random state and saved."""
    state = _random_state(seed)
    _fill(bank, state)
    return tf.train.Checkpoint(bank=bank).save(str(tmp_path / "ckpt")), state


def _assert_restores(path, target, state):
    before = _state(target)
    assert not np.array_equal(before["embeddings"], state["embeddings"])
    assert not np.array_equal(before["labels"], state["labels"])
    tf.train.Checkpoint(bank=target).restore(path).assert_consumed()
    for name, value in _state(target).items():
        assert value.dtype == state[name].dtype, name
        np.testing.assert_array_equal(value, state[name], err_msg=name)


def test_slice_spec_names_the_full_shape_then_the_rows():
    assert bank_slices.slice_spec((13, 8), 7, 13) == "13 8 7,6:-"
    assert bank_slices.slice_spec((5,), 0, 2) == "5 0,2"
    assert bank_slices.slice_spec((4, 2, 3), 1, 2) == "4 2 3 1,1:-:-"


@pytest.mark.parametrize("target", [1, 2, 3, 4, None])
def test_a_two_shard_checkpoint_restores_at_any_shard_count_and_replicated(make, target,
                                                                           tmp_path):
    path, state = _saved(make(2), tmp_path)
    _assert_restores(path, make(target, seed=9), state)


@pytest.mark.parametrize("target", [1, 2, 3, 4])
def test_a_replicated_checkpoint_restores_into_every_shard_count(make, target, tmp_path):
    path, state = _saved(make(None), tmp_path)
    _assert_restores(path, make(target, seed=9), state)


@pytest.mark.parametrize("target", [2, 4, None])
def test_a_shard_without_labelled_rows_saves_and_restores(make, target, tmp_path):
    """Three shards: the middle one holds no density row, so saves no density slice."""
    path, state = _saved(make(3), tmp_path)
    assert _slice_shapes(path)[KEY.format("density")] == [[2], [3]]
    _assert_restores(path, make(target, seed=9), state)


def _slice_shapes(path):
    """Checkpoint key -> the shapes of its stored tensors: one per slice of a sliced key, in row
    order (the bundle lists each slice under the key and an encoding of its extent), its
    whole shape otherwise."""
    shapes = {}
    for line in tf.train.load_checkpoint(path).debug_string().splitlines():
        name, description = line.rsplit(b" (", 1)
        key = name.split(b"\0")[1] if name.startswith(b"\0") else name
        shape = description.split(b"[")[1].rstrip(b"]")
        shapes.setdefault(key.decode(), []).append(
            [int(size) for size in shape.split(b",")] if shape else [])
    return shapes


def test_the_checkpoint_holds_each_shards_rows_as_slices_of_the_whole_key(make, tmp_path):
    path, state = _saved(make(2), tmp_path)
    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    slices = _slice_shapes(path)
    # Two shards: rows [0, 7) and [7, 13), labelled rows [1, 2] and [9, 11, 12].
    for name, whole, parts in [("embeddings", [N, D], [[7, D], [6, D]]),
                               ("labels", [N], [[7], [6]]), ("confidence", [N], [[7], [6]]),
                               ("is_labelled", [N], [[7], [6]]), ("density", [5], [[2], [3]]),
                               ("labelled_index", [5], [[5]])]:
        assert shapes[KEY.format(name)] == whole, name
        assert slices[KEY.format(name)] == parts, name
        np.testing.assert_array_equal(reader.get_tensor(KEY.format(name)), state[name])
    # The replicated bank saves each key whole, under the same names.
    whole_path, _ = _saved(make(None), tmp_path / "replicated")
    assert _slice_shapes(whole_path)[KEY.format("embeddings")] == [[N, D]]
    assert tf.train.load_checkpoint(whole_path).get_variable_to_shape_map() == shapes


def test_saving_reads_each_shard_alone(make, monkeypatch, tmp_path):
    """The saved tensors are the shards' own values, on their devices; the whole-bank read
    (`SlicedState.read_value`) is never called."""
    bank = make(2)
    state = _random_state(5)
    _fill(bank, state)
    factory = tf.__internal__.tracking.saveable_objects_from_trackable(bank.embeddings)
    specs = factory["VARIABLE_VALUE"]("embeddings").specs
    assert [spec.slice_spec for spec in specs] == ["13 8 0,7:-", "13 8 7,6:-"]
    for spec, shard in zip(specs, bank.shards):
        assert spec.device == shard.embeddings.device
        np.testing.assert_array_equal(spec.tensor.numpy(), state["embeddings"][shard.start:
                                                                                shard.stop])

    def whole_read(self):
        raise AssertionError("the whole bank was read")

    monkeypatch.setattr(bank_slices.SlicedState, "read_value", whole_read)
    path = tf.train.Checkpoint(bank=bank).save(str(tmp_path / "ckpt"))
    target = make(3, seed=9)
    tf.train.Checkpoint(bank=target).restore(path).assert_consumed()
    monkeypatch.undo()
    np.testing.assert_array_equal(target.embeddings.numpy(), state["embeddings"])


def test_restoring_reads_only_each_shards_slice(make, monkeypatch, tmp_path):
    """Four shards ([0, 4), [4, 7), [7, 10), [10, 13)) ask the checkpoint for their rows
    alone, from a two-shard checkpoint and from a replicated one."""
    for source in (2, None):
        path, _ = _saved(make(source), tmp_path / str(source))
        requests = {}
        restore_v2 = functional_saver.io_ops.restore_v2

        def recording(prefix, tensor_names, shape_and_slices, dtypes, *args, **kwargs):
            for name, spec in zip(tensor_names, shape_and_slices):
                requests.setdefault(name, []).append(spec)
            return restore_v2(prefix, tensor_names, shape_and_slices, dtypes, *args, **kwargs)

        monkeypatch.setattr(functional_saver.io_ops, "restore_v2", recording)
        tf.train.Checkpoint(bank=make(4, seed=9)).restore(path).assert_consumed()
        monkeypatch.undo()
        assert requests[KEY.format("embeddings")] == [
            "13 8 0,4:-", "13 8 4,3:-", "13 8 7,3:-", "13 8 10,3:-"]
        assert requests[KEY.format("density")] == ["5 0,2", "5 2,1", "5 3,2"]
        assert requests[KEY.format("labelled_index")] == [""]


def test_a_checkpoint_of_another_bank_size_is_refused(make, tmp_path):
    path, _ = _saved(make(2), tmp_path)
    other = make(2, num_examples=N + 1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="does not match the shape"):
        tf.train.Checkpoint(bank=other).restore(path)


def test_a_bank_without_labelled_rows_saves_its_empty_density_whole(make, tmp_path):
    """No shard holds a density row: the key is saved whole and empty, as the replicated bank
    saves it, and a checkpoint with labelled rows is refused."""
    unlabelled = make(2, seed=1, labelled=[], classes=[])
    path = tf.train.Checkpoint(bank=unlabelled).save(str(tmp_path / "ckpt"))
    assert _slice_shapes(path)[KEY.format("density")] == [[0]]
    for target in (make(None, seed=9, labelled=[], classes=[]),
                   make(4, seed=9, labelled=[], classes=[])):
        tf.train.Checkpoint(bank=target).restore(path).assert_consumed()
        np.testing.assert_array_equal(target.embeddings.numpy(), unlabelled.embeddings.numpy())
        assert target.density.numpy().shape == (0,)
    labelled_path, _ = _saved(make(2), tmp_path / "labelled")
    with pytest.raises(ValueError, match="has 5 rows where this bank has none"):
        tf.train.Checkpoint(bank=unlabelled).restore(labelled_path)
