"""Checkpoints of bank state in blocks (`bank_slices`, `row_blocks`): each shard, or the
replicated `MemoryBank` as one part, saves its rows as slices of the replicated bank's keys
cut at the fixed blocks, at most a block a write, and restores only the rows it owns, a
block at a time, at any shard count; checkpoints written before blocks (a slice per shard,
or keys whole) restore too. Banks are filled with random state, so a restore must give it
back bit for bit. No collective runs: the strategies only name each shard count's devices."""

import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
# TensorFlow's SaveableObject has no public name: the saves before blocks used it.
from tensorflow.python.training.saving import saveable_object

from llp_tf.core import bank_slices, row_blocks
from llp_tf.core.memory_bank import MemoryBank
from llp_tf.core.sharded_bank import ShardedMemoryBank
from tests.cli.tool_main import ROOT

N, D, C = 13, 8, 3
# Sorted; over 3 shards ([0, 5), [5, 9), [9, 13)) the middle one has no labelled row.
LABELLED = np.array([1, 2, 9, 11, 12])
LABELLED_CLASSES = np.array([0, 1, 2, 0, 1])
ROW_STATE = ("embeddings", "labels", "confidence", "is_labelled")
STATE = ROW_STATE + ("density", "labelled_index")
KEY = "bank/{}/.ATTRIBUTES/VARIABLE_VALUE"
ML_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


@pytest.fixture
def make(two_replica_strategy, four_replica_strategy):
    """make(shards, seed=0) -> a sharded bank over ``shards`` devices (1 to 4), or the
    replicated bank for None (of float32 embeddings unless ``embedding_dtype`` says)."""
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

    def bank(shards, seed=0, num_examples=N, labelled=LABELLED, classes=LABELLED_CLASSES,
             embedding_dtype="float32"):
        split = (num_examples, D, C, labelled, classes)
        if shards is None:
            return MemoryBank(*split, seed=seed, embedding_dtype=embedding_dtype)
        return ShardedMemoryBank(strategies[shards], *split, seed=seed,
                                 embedding_dtype=embedding_dtype)
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


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 120 bytes: 3 rows of embeddings (8 float32 and an int64 index), 7 of labels,
    10 of confidence and density, 13 of is_labelled."""
    monkeypatch.setattr(row_blocks, "BLOCK_BYTES", 120)
    return {"embeddings": 3, "labels": 7, "confidence": 10, "is_labelled": 13, "density": 10}


def _recorded(monkeypatch, op):
    """The calls of ``tf.raw_ops.<op>`` from now on, each {"names", "specs", "rows"}: its
    keys, slice specs and each tensor's rows (the saved ones, or those restored)."""
    calls, run = [], getattr(tf.raw_ops, op)

    def recording(**kwargs):
        result = run(**kwargs)
        tensors = kwargs.get("tensors", result)
        calls.append({"names": list(kwargs["tensor_names"]),
                      "specs": list(kwargs["shape_and_slices"]),
                      "bytes": sum(int(tf.size(t)) * t.dtype.size for t in tensors)})
        return result

    monkeypatch.setattr(tf.raw_ops, op, recording)
    return calls


def _rows_of(spec):
    """(start, stop) of a row slice spec ("13 8 3,2:-" -> (3, 5))."""
    start, length = spec.split(" ")[-1].split(":")[0].split(",")
    return int(start), int(start) + int(length)


@pytest.mark.parametrize("source", [3, None])
def test_a_save_writes_blocks_of_the_fixed_grid_at_most_a_block_a_write(
        make, small_blocks, monkeypatch, tmp_path, source):
    """Each stored slice is a part's rows within one block; each SaveV2 stages at most a block
    of rows (with their int64 index); the bank is never read whole. Three shards ([0, 5),
    [5, 9), [9, 13)) cut the blocks of their edges; the replicated bank is one part."""
    bank = make(source)
    _fill(bank, _random_state(5))
    monkeypatch.setattr(bank_slices.SlicedState, "read_value", _whole_read)
    saves = _recorded(monkeypatch, "SaveV2")
    path = tf.train.Checkpoint(bank=bank).save(str(tmp_path / "ckpt"))
    monkeypatch.undo()
    written = {}
    for call in saves:
        assert call["bytes"] + 8 * sum(b - a for a, b in map(_rows_of, call["specs"])) <= 120
        for name, spec in zip(call["names"], call["specs"]):
            written.setdefault(name, []).append(_rows_of(spec))
    for name, rows in small_blocks.items():
        slices = sorted(written[KEY.format(name)])
        assert all(start // rows == (stop - 1) // rows for start, stop in slices), name
        edges = [edge for pair in slices for edge in pair]
        assert edges[0] == 0 and edges[1:-1:2] == edges[2:-1:2], name  # they tile the rows
    blocks = [(0, 3), (3, 5), (5, 6), (6, 9), (9, 12), (12, 13)] if source else [
        (0, 3), (3, 6), (6, 9), (9, 12), (12, 13)]
    assert sorted(written[KEY.format("embeddings")]) == blocks
    # The checkpoint holds what was written: the stored slices' shapes, in row order.
    assert _slice_shapes(path)[KEY.format("embeddings")] == [[b - a, D] for a, b in blocks]
    _assert_restores(path, make(2, seed=9), _random_state(5))


def _whole_read(self):
    raise AssertionError("the whole state was read")


@pytest.mark.parametrize("source", [3, None])
def test_a_restore_reads_the_blocks_of_each_part_one_at_a_time(make, small_blocks,
                                                                monkeypatch, tmp_path, source):
    """Four shards ([0, 4), [4, 7), [7, 10), [10, 13)) ask the checkpoint for their rows in
    the blocks of the grid, one RestoreV2 each, from three shards' and the replicated bank's."""
    path, state = _saved(make(source), tmp_path)
    restores = _recorded(monkeypatch, "RestoreV2")
    target = make(4, seed=9)
    tf.train.Checkpoint(bank=target).restore(path).assert_consumed()
    monkeypatch.undo()
    assert all(len(call["names"]) == 1 for call in restores)
    asked = {}
    for call in restores:
        asked.setdefault(call["names"][0], []).append(call["specs"][0])
    assert asked[KEY.format("embeddings")] == [
        "13 8 0,3:-", "13 8 3,1:-", "13 8 4,2:-", "13 8 6,1:-", "13 8 7,2:-", "13 8 9,1:-",
        "13 8 10,2:-", "13 8 12,1:-"]
    assert asked[KEY.format("density")] == ["5 0,2", "5 2,1", "5 3,2"]
    for name, value in _state(target).items():
        np.testing.assert_array_equal(value, state[name], err_msg=name)


class _PreBlockSlices(tf.__internal__.tracking.Trackable):
    """A state as checkpoints saved it before blocks: a slice of its key per shard of
    ``bounds`` (its rows whole if one), through a SaveableObject."""

    def __init__(self, value, bounds):
        self.value, self.bounds = value, bounds

    def _gather_saveables_for_checkpoint(self):
        def saveable(name):
            specs = [saveable_object.SaveSpec(
                tf.constant(self.value[start:stop]),
                bank_slices.slice_spec(self.value.shape, start, stop) if len(self.bounds) > 1
                else "", name) for start, stop in self.bounds]
            return saveable_object.SaveableObject(self, specs, name)
        return {"VARIABLE_VALUE": saveable}


def _pre_block_checkpoint(state, bounds, path):
    """A checkpoint of ``state`` as the bank saved it before blocks: each field a slice per
    part of ``bounds`` (the shards' rows, or one part: the replicated bank's whole keys)."""
    bank = tf.Module()
    labelled = [tuple(np.searchsorted(LABELLED, pair)) for pair in bounds]
    for name in ROW_STATE:
        setattr(bank, name, _PreBlockSlices(state[name], bounds))
    bank.density = _PreBlockSlices(state["density"], labelled)
    bank.labelled_index = tf.Variable(state["labelled_index"])
    return tf.train.Checkpoint(bank=bank).save(path)


@pytest.mark.parametrize("target", [1, 2, 3, 4, None])
@pytest.mark.parametrize("bounds", [[(0, 7), (7, 13)], [(0, N)]])
def test_a_checkpoint_written_before_blocks_restores_each_part_in_one_read(
        make, small_blocks, monkeypatch, tmp_path, bounds, target):
    """Sliced at two shards' bounds, or each key whole (the replicated bank's): every part
    reads its rows in one piece."""
    state = _random_state(5)
    path = _pre_block_checkpoint(state, bounds, str(tmp_path / "ckpt"))
    assert _slice_shapes(path)[KEY.format("embeddings")] == [[b - a, D] for a, b in bounds]
    restores = _recorded(monkeypatch, "RestoreV2")
    bank = make(target, seed=9)
    _assert_restores(path, bank, state)
    monkeypatch.undo()
    parts = [(0, N)] if target is None else [(s.start, s.stop) for s in bank.shards]
    assert [_rows_of(call["specs"][0]) for call in restores
            if call["names"] == [KEY.format("embeddings")]] == parts


def test_a_checkpoint_of_another_bank_size_is_refused(make, tmp_path):
    path, _ = _saved(make(2), tmp_path)
    other = make(2, num_examples=N + 1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="does not match the shape"):
        tf.train.Checkpoint(bank=other).restore(path)


@pytest.mark.parametrize("saved,restored", [("bfloat16", "float32"), ("float32", "bfloat16"),
                                            ("bfloat16", "float16")])
@pytest.mark.parametrize("source,target", [(2, None), (None, 3)])
def test_a_checkpoint_of_another_bank_dtype_restores_converted(make, tmp_path, saved, restored,
                                                                source, target):
    """The checkpoint stores the embeddings in the saved bank's dtype, in that dtype's blocks;
    a bank of another dtype restores them cast, rounded to nearest when narrowing; the rest
    of the state bit for bit."""
    bank = make(source, embedding_dtype=saved)
    state = _random_state(5)
    state["embeddings"] = state["embeddings"].astype(ML_DTYPES[saved])
    _fill(bank, state)
    path = tf.train.Checkpoint(bank=bank).save(str(tmp_path / "ckpt"))
    key = KEY.format("embeddings")
    assert tf.train.load_checkpoint(path).get_variable_to_dtype_map()[key] == getattr(tf, saved)
    block_rows = bank.checkpoint_states()["embeddings"].block_rows
    assert block_rows == row_blocks.block_rows(D * getattr(tf, saved).size)
    into = make(target, seed=9, embedding_dtype=restored)
    tf.train.Checkpoint(bank=into).restore(path).assert_consumed()
    rows = into.read_rows(["embeddings", "labels", "confidence", "is_labelled"], 0, N)
    want = state["embeddings"].astype(np.float32).astype(ML_DTYPES[restored])
    np.testing.assert_array_equal(rows["embeddings"], want.astype(np.float32))
    assert into.embeddings.dtype == getattr(tf, restored)
    for name in ("labels", "confidence", "is_labelled"):
        np.testing.assert_array_equal(rows[name], state[name], err_msg=name)
    np.testing.assert_array_equal(np.asarray(into.density.numpy()), state["density"])


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
    with pytest.raises(ValueError, match=r"shape \(5,\)"):
        tf.train.Checkpoint(bank=unlabelled).restore(labelled_path)
    with pytest.raises(ValueError, match="has 5 rows where this bank has none"):
        bank_slices.restore_blocks({KEY.format("density"): unlabelled.density}, labelled_path)


@pytest.mark.slow  # two fresh processes of a 1 GiB bank each: about a minute
@pytest.mark.parametrize("kind", ["replicated", "sharded"])
def test_a_save_and_a_cold_restore_hold_about_a_block_beyond_the_bank(kind, tmp_path):
    """2M rows of 128 float32 (1 GiB; sharded: over two replicas), saved by one process and
    restored by a fresh one (`benchmarks/bench_bank_checkpoint.py`'s probes): while saving or
    restoring, the peak RSS rises by at most a quarter of the bank (a block is 64 MiB, a
    restore holds one and the stored slice it is cut from), and no process's peak exceeds
    its RSS before the bank by more than 1.25 times the bank and 256 MiB."""
    figures = {}
    for step in ("save", "restore"):
        result = subprocess.run(
            [sys.executable, os.path.join(ROOT, "benchmarks", "bench_bank_checkpoint.py"),
             f"--probe={step}", "--bank=2000000", f"--kind={kind}", "--replicas=2",
             f"--checkpoint_dir={tmp_path}"],
            env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
            timeout=600)
        assert result.returncode == 0, result.stderr
        figures[step] = json.loads(result.stdout.strip().splitlines()[-1])
    bank_mib = figures["save"]["bank_bytes"] / 2**20
    assert 1000 < bank_mib < 1010
    for step, got in figures.items():
        assert got["growth_mib"] <= 0.25 * bank_mib, (step, got)
        for peak in (got["build_peak_mib"], got["peak_over_before_bank_mib"]):
            assert peak <= 1.25 * bank_mib + 256, (step, got)
