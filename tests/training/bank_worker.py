"""One process of a run that holds only a memory bank, for the tests of checkpoints across
workers (`tests.training.test_sliced_checkpoint`): it saves and restores through the run's
`RunCheckpoints`, on a cluster of workers (``TF_CONFIG``) or alone.

  python -m tests.training.bank_worker RUN_DIR ACTION STEP CPU_REPLICAS BANK [--die_after_part]

ACTION ``fill`` writes `bank_state` into the bank, ``restore`` restores the run's newest
checkpoint; then the bank is saved as checkpoint STEP. BANK is ``sharded`` or
``replicated``. Faults, each of a worker that is not the chief unless said:
``--die_after_part``: it kills itself (SIGKILL) once its part of the checkpoint is written,
before the workers agree on it; ``--part_fails``: writing its part fails as on a full disk;
``--die_between_votes``: it kills itself after the workers agree that every part is written,
before they agree that the chief merged them; ``--truncate_part`` / ``--flip_part_byte``: its
part's data file loses its last byte / has one byte flipped after its manifest is written;
``--die_mid_merge`` (the chief): it kills itself once the first merged file is renamed into
place.
"""

import dataclasses
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


def _damage_part(damage):
    write_part = sliced_checkpoint.write_part

    def write_then_damage(prefix, states):
        write_part(prefix, states)
        data = sorted(name for name in os.listdir(os.path.dirname(prefix))
                      if name.startswith(os.path.basename(prefix) + ".data-"))[0]
        damage(os.path.join(os.path.dirname(prefix), data))

    sliced_checkpoint.write_part = write_then_damage


def _truncate(path):
    os.truncate(path, os.path.getsize(path) - 1)


def _flip_byte(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))


def _die_mid_merge():
    def publish_first_then_die(merged, folder):
        first = sorted(merged)[0]
        os.replace(first, os.path.join(folder, os.path.basename(first)))
        os.kill(os.getpid(), signal.SIGKILL)

    sliced_checkpoint.publish = publish_first_then_die


def _die_between_votes(checkpoints):
    votes = []
    failing = checkpoints.workers.failing

    def vote_then_die_before_the_second(ok):
        if votes:
            os.kill(os.getpid(), signal.SIGKILL)
        votes.append(ok)
        return failing(ok)

    checkpoints.workers = dataclasses.replace(checkpoints.workers,
                                              failing=vote_then_die_before_the_second)


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
    if "--truncate_part" in options and not chief:
        _damage_part(_truncate)
    if "--flip_part_byte" in options and not chief:
        _damage_part(_flip_byte)
    if "--die_mid_merge" in options and chief:
        _die_mid_merge()
    with tempfile.TemporaryDirectory() as scratch:
        checkpoints = RunCheckpoints({"bank": bank}, RunDirectory(run_dir), keep=10,
                                     stream=sys.stdout, scratch_dir=None if chief else scratch,
                                     workers=cluster.workers_of(strategy))
        if action == "fill":
            _fill(bank, bank_state())
        else:
            print("restored", checkpoints.restore_latest(), flush=True)
            if checkpoints.workers is not None:
                # As the training steps between a restore and the next save do, a collective:
                # the chief's sweep of unfinished saves is over before any part is written.
                checkpoints.workers.failing(True)
        if "--die_between_votes" in options and not chief:
            _die_between_votes(checkpoints)
        print("saved", checkpoints.save(int(step)), "rows", *bank.held_rows, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
