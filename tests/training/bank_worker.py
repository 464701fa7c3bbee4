"""One process of a run that holds only a memory bank, for the tests of checkpoints across
workers (`tests.training.test_sliced_checkpoint`): it saves and restores through the run's
`RunCheckpoints`, on a cluster of workers (``TF_CONFIG``) or alone.

  python -m tests.training.bank_worker RUN_DIR ACTION STEP CPU_REPLICAS BANK [--die_after_part]

ACTION ``fill`` writes `bank_state` into the bank, ``restore`` restores the run's newest
checkpoint; then the bank is saved as checkpoint STEP. BANK is ``sharded`` or
``replicated``. ``--die_after_part``: this worker (not the chief) kills itself (SIGKILL)
once its part of the checkpoint is written, before the workers agree on it;
``--part_fails``: writing its part fails as on a full disk.
"""

import errno

import os
import signal
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from llp_tf.core.memory_bank import MemoryBank  # noqa: E402
from llp_tf.core.sharded_bank import ShardedMemoryBank  # noqa: E402
from llp_tf.training import cluster, sliced_checkpoint  # noqa: E402
from llp_tf.training.checkpoints import RunCheckpoints  # noqa: E402
from llp_tf.training.distribution import make_strategy  # noqa: E402
from llp_tf.training.run_directory import RunDirectory  # noqa: E402

#: N (not a multiple of 2, 3 or 4 replicas), D, C; every seventh row labelled.
N, D, C = 103, 8, 5
LABELLED = np.arange(0, N, 7)


def bank_state():
    """The whole bank's state the ``fill`` action writes, numpy arrays by name."""
    rng = np.random.default_rng(3)
    return {"embeddings": rng.normal(size=(N, D)).astype(np.float32),
            "labels": rng.integers(0, 1000, N).astype(np.int64),
            "confidence": rng.uniform(size=N).astype(np.float32),
            "is_labelled": np.isin(np.arange(N), LABELLED),
            "density": rng.uniform(1, 5, LABELLED.size).astype(np.float32)}


def labelled_classes():
    return LABELLED % C


def _fill(bank, state):
    if isinstance(bank, MemoryBank):
        for name in ("embeddings", "labels", "confidence", "is_labelled", "density"):
            getattr(bank, name).assign(state[name])
        return
    for shard in bank.shards:  # this process's rows only
        for name in ("embeddings", "labels", "confidence", "is_labelled"):
            getattr(shard, name).assign(state[name][shard.start:shard.stop])
        shard.density.assign(state["density"][shard.labelled_start:shard.labelled_stop])


def _die_after_part():
    write_part = sliced_checkpoint.write_part

    def write_then_die(prefix, states):
        write_part(prefix, states)
        os.kill(os.getpid(), signal.SIGKILL)

    sliced_checkpoint.write_part = write_then_die


def _part_fails():
    def full_disk(prefix, states):
        raise OSError(errno.ENOSPC, "No space left on device", prefix)

    sliced_checkpoint.write_part = full_disk


def main(run_dir, action, step, cpu_replicas, kind, *options):
    strategy = make_strategy(int(cpu_replicas), "auto")
    if kind == "sharded":
        bank = ShardedMemoryBank(strategy, N, D, C, LABELLED, labelled_classes())
    else:
        with strategy.scope():
            bank = MemoryBank(N, D, C, LABELLED, labelled_classes())
    chief = cluster.is_chief(strategy)
    if "--die_after_part" in options and not chief:
        _die_after_part()
    if "--part_fails" in options and not chief:
        _part_fails()
    with tempfile.TemporaryDirectory() as scratch:
        checkpoints = RunCheckpoints({"bank": bank}, RunDirectory(run_dir), keep=10,
                                     stream=sys.stdout, scratch_dir=None if chief else scratch,
                                     workers=cluster.workers_of(strategy))
        if action == "fill":
            _fill(bank, bank_state())
        else:
            print("restored", checkpoints.restore_latest(), flush=True)
        print("saved", checkpoints.save(int(step)), "rows", *bank.held_rows, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
