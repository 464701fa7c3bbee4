"""`StoredBank`: a checkpoint's bank read a stored block at a time, never restored. Banks are
filled with random state, so every read must give it back bit for bit; the reads themselves
are recorded to check that each is one stored block, read once while a reader stays in it."""

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from llp_tf.after_training.stored_bank import StoredBank
from llp_tf.core import bank_statistics, row_blocks
from llp_tf.core.memory_bank import MemoryBank
from llp_tf.errors import ConfigError
from tests.cli.tool_main import ROOT
from tests.core.test_bank_slices import (KEY, N, ROW_STATE, _fill, _pre_block_checkpoint,
                                         _random_state, _recorded, _rows_of, make, small_blocks)

FIXTURES = (make, small_blocks)  # the banks of each shard count, blocks of a few rows
EXAMPLES = np.arange(100, 100 + N)


def _saved(bank, tmp_path):
    state = _random_state(5)
    _fill(bank, state)
    return tf.train.Checkpoint(bank=bank).save(str(tmp_path / "ckpt")), state


@pytest.mark.parametrize("shards", [None, 2])
def test_rows_come_back_from_the_blocks_each_read_once(make, small_blocks, monkeypatch,
                                                       tmp_path, shards):
    path, state = _saved(make(shards), tmp_path)
    bank = StoredBank(path, EXAMPLES)
    assert (bank.num_examples, bank.dim, bank.held_rows) == (N, 8, (0, N))
    reads = _recorded(monkeypatch, "RestoreV2")
    blocks = list(bank.held_blocks(ROW_STATE, block_rows=4))
    assert [first for first, _ in blocks] == [0, 4, 8, 12]
    for name in ROW_STATE:
        np.testing.assert_array_equal(np.concatenate([rows[name] for _, rows in blocks]),
                                      state[name], err_msg=name)
        assert np.concatenate([rows[name] for _, rows in blocks]).dtype == state[name].dtype
        # One read of each stored block of the state, in order.
        size = small_blocks[name]
        assert [_rows_of(call["specs"][0]) for call in reads
                if call["names"] == [KEY.format(name)]] == [
            (start, min(start + size, N)) for start in range(0, N, size)]
    picked = np.array([12, 0, 5, 5, 3])
    at = bank.rows_at(ROW_STATE, picked)
    for name in ROW_STATE:
        np.testing.assert_array_equal(at[name], state[name][picked], err_msg=name)
        np.testing.assert_array_equal(bank.read_rows([name], 2, 11)[name], state[name][2:11])
        np.testing.assert_array_equal(bank[name], state[name])
    np.testing.assert_array_equal(bank["examples"], EXAMPLES)
    assert sorted(bank) == sorted([*ROW_STATE, "examples"])
    assert bank.read_rows(["embeddings"], 4, 4)["embeddings"].shape == (0, 8)


@pytest.mark.parametrize("bounds", [[(0, 7), (7, 13)], [(0, N)]])
def test_a_checkpoint_written_before_blocks_is_read_a_state_at_a_time_whole(
        small_blocks, monkeypatch, tmp_path, bounds):
    state = _random_state(5)
    path = _pre_block_checkpoint(state, bounds, str(tmp_path / "ckpt"))
    bank = StoredBank(path, EXAMPLES)
    reads = _recorded(monkeypatch, "RestoreV2")
    blocks = list(bank.held_blocks(ROW_STATE, block_rows=4))
    for name in ROW_STATE:
        np.testing.assert_array_equal(np.concatenate([rows[name] for _, rows in blocks]),
                                      state[name], err_msg=name)
    # Each state once, whole: embeddings [N, 8] ("0,13:-"), then the three of [N].
    assert [call["names"] for call in reads] == [[KEY.format(name)] for name in ROW_STATE]
    assert [call["specs"][0].split(" ")[-1] for call in reads] == [f"0,{N}:-"] + [f"0,{N}"] * 3


@pytest.mark.parametrize("shards", [None, 2])
def test_half_precision_embeddings_are_read_in_their_own_blocks_as_float32(
        make, small_blocks, monkeypatch, tmp_path, shards):
    """A bfloat16 bank's embeddings: blocks of 5 rows (8 bfloat16 and an int64 index in 120
    bytes), each read once, in the stored dtype, given back as float32."""
    bank = make(shards, embedding_dtype="bfloat16")
    state = _random_state(5)
    state["embeddings"] = state["embeddings"].astype(ml_dtypes.bfloat16)
    _fill(bank, state)
    path = tf.train.Checkpoint(bank=bank).save(str(tmp_path / "ckpt"))
    stored = StoredBank(path, EXAMPLES)
    assert stored.stored_dtypes["embeddings"] == tf.bfloat16
    assert stored.block_rows("embeddings") == 5
    reads = _recorded(monkeypatch, "RestoreV2")
    rows = stored.read_rows(["embeddings"], 0, N)["embeddings"]
    assert rows.dtype == np.float32
    np.testing.assert_array_equal(rows, state["embeddings"].astype(np.float32))
    assert [_rows_of(call["specs"][0]) for call in reads] == [
        (start, min(start + 5, N)) for start in range(0, N, 5)]
    picked = np.array([12, 0, 5])
    np.testing.assert_array_equal(stored.rows_at(["embeddings"], picked)["embeddings"],
                                  state["embeddings"][picked].astype(np.float32))


def test_another_runs_checkpoint_or_one_without_a_bank_is_refused(make, tmp_path):
    path, _ = _saved(make(None), tmp_path)
    with pytest.raises(ConfigError, match=f"bank has {N} rows where its run uses {N + 1}"):
        StoredBank(path, np.arange(N + 1))
    plain = tf.train.Checkpoint(model=tf.Module()).save(str(tmp_path / "plain"))
    with pytest.raises(ConfigError, match="holds no memory bank"):
        StoredBank(plain, EXAMPLES)


#: In a fresh process: opens the bank of argv[1] ([N, 128], N = argv[2]), sums its classes
#: over blocks as analyze does and takes 10,000 rows at random; prints the peak RSS in bytes
#: before reading any row and after.
READ_IN_BLOCKS = """
import resource, sys
import numpy as np
from llp_tf.after_training.stored_bank import StoredBank
from llp_tf.core import bank_statistics
num_rows = int(sys.argv[2])
bank = StoredBank(sys.argv[1], np.arange(num_rows))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
held = bank_statistics.held_sums(bank, np.arange(num_rows) % 10, 10, bank_statistics.GROUPINGS)
assert held.groups["true"][1].sum() == num_rows
rows = np.random.default_rng(0).choice(num_rows, 10_000, replace=False)
assert bank.rows_at(["embeddings", "labels"], rows)["embeddings"].shape == (10_000, 128)
print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


@pytest.mark.slow  # writes a 1 GiB checkpoint, then reads it in a fresh process
def test_reading_a_two_million_row_bank_holds_blocks_not_the_bank(tmp_path):
    num_rows, dim = 2_000_000, 128
    bank = MemoryBank(num_rows, dim, 10, np.arange(10), np.arange(10))
    path = tf.train.Checkpoint(bank=bank).write(str(tmp_path / "ckpt"))
    del bank
    result = subprocess.run([sys.executable, "-c", READ_IN_BLOCKS, path, str(num_rows)],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    before, after = (int(value) for value in result.stdout.split()[-2:])
    # At most one stored block of each of the four states, the float64 copy of a chunk of
    # rows that the sums take and that chunk's read: a constant, where the bank is 1.03 GiB.
    bound = (4 * row_blocks.BLOCK_BYTES
             + bank_statistics.SUM_CHUNK_ROWS * dim * (8 + 4))
    assert after - before < bound, (before, after, bound)
    assert bound < num_rows * (dim * 4 + 14) / 2
