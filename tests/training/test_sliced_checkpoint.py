"""The checkpoint of a bank sharded across workers (`sliced_checkpoint`, `RunCheckpoints`):
its parts merged and checked in this process, then bank-only processes
(`tests.training.bank_worker`) on 127.0.0.1 save and restore it, each worker its own rows.
A checkpoint two workers of two replicas wrote holds the bank bit for bit; it restores bit
for bit at three workers, in one process sharded over 1 to 4 replicas and in the replicated
bank; a part a worker cannot write fails the checkpoint on every worker; a worker killed
between writing its part and the workers' agreement, a part truncated or with a flipped byte,
a worker killed between the two votes and a chief killed mid-merge each leave the previous
checkpoint the newest, and the relaunch removes what the save left and saves it again."""

import os
import shutil
import subprocess
import sys

import google_crc32c
import numpy as np
import pytest
import tensorflow as tf

from llp_tf.core.bank_slices import SlicedState
from llp_tf.core.memory_bank import MemoryBank
from llp_tf.core.sharded_bank import ShardedMemoryBank
from llp_tf.training import local_launcher, part_manifest, sliced_checkpoint
from llp_tf.training.run_directory import RunDirectory
from tests.cli.tool_main import ROOT, load_tool
from tests.training import bank_worker

TIMEOUT_SECONDS = 180
FIELDS = ("embeddings", "labels", "confidence", "is_labelled", "density")
KEY = "bank/{}/.ATTRIBUTES/VARIABLE_VALUE"


#: A field of 13 rows in two parts, as two workers hold it.
ROWS = np.arange(26, dtype=np.float32).reshape(13, 2)
BOUNDS = [(0, 5), (5, 13)]
FIELD = KEY.format("embeddings")


def _worker_states(worker):
    """The `SlicedState` of `ROWS` that worker ``worker`` (0 or 1) holds, by key."""
    start, stop = BOUNDS[worker]
    return {FIELD: SlicedState([tf.Variable(ROWS[start:stop])], BOUNDS, first=worker)}


def test_the_sliced_states_are_the_bank_fields_of_a_bank_held_in_part(two_replica_strategy,
                                                                      monkeypatch):
    bank = ShardedMemoryBank(two_replica_strategy, 13, 2, 2, [0, 7], [0, 1])
    replicated = MemoryBank(13, 2, 2, [0, 7], [0, 1])
    items = {"bank": bank, "replicated": replicated, "step": tf.Variable(0)}
    # In one process each bank holds every row: no worker writes a part of it.
    assert sliced_checkpoint.sliced_states(items) == {}
    # As the first of two workers holds its rows.
    monkeypatch.setattr(ShardedMemoryBank, "held_rows", (0, 7))
    states = sliced_checkpoint.sliced_states(items)
    assert sorted(states) == sorted(KEY.format(name) for name in FIELDS)
    assert states[FIELD] is bank.embeddings


def test_each_part_s_manifest_records_its_files_and_rows(tmp_path):
    prefix = str(tmp_path / "ckpt-3")
    part = sliced_checkpoint.part_prefix(prefix, 1)
    sliced_checkpoint.write_part(part, _worker_states(1))
    manifest = part_manifest.read_manifest(part)
    assert manifest["keys"] == {FIELD: {"shape": [13, 2], "rows": [[5, 13]]}}
    files = sorted(name for name in os.listdir(os.path.dirname(part))
                   if not name.endswith(part_manifest.MANIFEST_SUFFIX))
    assert sorted(manifest["files"]) == files == ["worker-1.data-00000-of-00001",
                                                  "worker-1.index"]
    for name, entry in manifest["files"].items():
        content = (tmp_path / "ckpt-3.parts" / name).read_bytes()
        assert entry == {"bytes": len(content), "crc32c": google_crc32c.value(content)}
    # The standard crc32c check value.
    (tmp_path / "digits").write_bytes(b"123456789")
    assert part_manifest.file_digest(str(tmp_path / "digits")) == {"bytes": 9,
                                                                   "crc32c": 0xE3069283}


def _damaged(path, how):
    if how == "truncated":
        os.truncate(path, os.path.getsize(path) - 1)
    else:
        content = bytearray(open(path, "rb").read())
        content[len(content) // 2] ^= 1
        open(path, "wb").write(bytes(content))


@pytest.mark.parametrize("how, problem", [
    ("truncated", "worker-1.data-00000-of-00001 has {} bytes, its manifest {}"),
    ("flipped", "worker-1.data-00000-of-00001 fails its crc32c")])
def test_a_damaged_part_is_named_before_any_merge(tmp_path, how, problem):
    prefix = str(tmp_path / "ckpt-3")
    for worker in (0, 1):
        sliced_checkpoint.write_part(sliced_checkpoint.part_prefix(prefix, worker),
                                     _worker_states(worker))
    data = sliced_checkpoint.part_prefix(prefix, 1) + ".data-00000-of-00001"
    size = os.path.getsize(data)
    _damaged(data, how)
    assert sliced_checkpoint.part_problems(prefix, 2, _worker_states(0)) == [
        "worker 1's part: " + problem.format(size - 1, size)]


@pytest.mark.parametrize("bounds, problem", [
    ([(0, 6), (5, 13)], "rows overlap at 5"),
    ([(0, 4), (5, 13)], "rows miss at 4"),
    ([(0, 5), (5, 12)], "rows end at 12 of 13"),
])
def test_rows_that_do_not_tile_the_key_are_named(bounds, problem):
    manifests = {w: {"keys": {FIELD: {"shape": [13, 2], "rows": [list(bounds[w])]}}}
                 for w in (0, 1)}
    assert part_manifest.tiling_problems(manifests, {FIELD: [13, 2]}) == [f"{FIELD} {problem}"]
    assert part_manifest.tiling_problems(manifests, {FIELD: [14, 2]}) == [
        f"{FIELD} recorded at shape (13, 2), not [14, 2]"]
    whole = {w: {"keys": {FIELD: {"shape": [13, 2], "rows": [list(BOUNDS[w])]}}} for w in (0, 1)}
    assert part_manifest.tiling_problems(whole, {FIELD: [13, 2]}) == []


def test_the_files_of_saves_no_checkpoint_records_are_swept(tmp_path):
    names = ["checkpoint", "ckpt-1.index", "ckpt-1.data-00000-of-00001", "ckpt-2.index",
             "ckpt-2.data-00000-of-00002", "ckpt-12.data-00001-of-00002", "notes.txt"]
    folders = ["damaged", "ckpt-2.parts", "ckpt-2.merging", "ckpt-3_temp", "ckpt-1.parts"]

    def make():
        for name in names:
            (tmp_path / name).write_text("x")
        for name in folders:
            (tmp_path / name).mkdir(exist_ok=True)
            (tmp_path / name / "f").write_text("x")

    make()
    swept = sliced_checkpoint.sweep_unrecorded(str(tmp_path), [str(tmp_path / "ckpt-1")])
    assert swept == ["ckpt-12.data-00001-of-00002", "ckpt-2.data-00000-of-00002",
                     "ckpt-2.index", "ckpt-2.merging/", "ckpt-2.parts/", "ckpt-3_temp/"]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-1.data-00000-of-00001",
                                            "ckpt-1.index", "ckpt-1.parts", "damaged",
                                            "notes.txt"]
    # Without a checkpoint state, no checkpoint's files go: only unfinished saves' folders.
    make()
    swept = sliced_checkpoint.sweep_unrecorded(str(tmp_path), None)
    assert swept == ["ckpt-1.parts/", "ckpt-2.merging/", "ckpt-2.parts/", "ckpt-3_temp/"]


def test_merged_parts_are_one_key_read_whole_and_their_folder_goes(tmp_path):
    prefix = str(tmp_path / "ckpt-3")
    for worker in (0, 1):
        sliced_checkpoint.write_part(sliced_checkpoint.part_prefix(prefix, worker),
                                     _worker_states(worker))
    assert sliced_checkpoint.part_problems(prefix, 2, _worker_states(0)) == []
    sliced_checkpoint.merge_parts(prefix, 2)
    assert sliced_checkpoint.missing_keys(prefix, _worker_states(0)) == []
    np.testing.assert_array_equal(tf.train.load_checkpoint(prefix).get_tensor(FIELD), ROWS)
    assert sorted(os.listdir(tmp_path)) == [
        "ckpt-3.data-00000-of-00002", "ckpt-3.data-00001-of-00002", "ckpt-3.index"]


def test_a_part_without_its_manifest_is_missing_and_a_key_not_merged_is_named(tmp_path):
    prefix = str(tmp_path / "ckpt-3")
    for worker in (0, 1):
        sliced_checkpoint.write_part(sliced_checkpoint.part_prefix(prefix, worker),
                                     _worker_states(worker))
    # A worker stopped while writing leaves its part without the manifest, written last.
    os.remove(part_manifest.manifest_path(sliced_checkpoint.part_prefix(prefix, 1)))
    assert sliced_checkpoint.missing_parts(prefix, 2) == [1]
    assert sliced_checkpoint.part_problems(prefix, 2, _worker_states(0)) == [
        "no part from worker(s) 1"]
    other = str(tmp_path / "ckpt-4")
    sliced_checkpoint.write_part(other, _worker_states(0))
    density = KEY.format("density")
    states = dict(_worker_states(0), **{density: SlicedState(
        [tf.Variable(np.ones(2, np.float32))], [(0, 2), (2, 3)])})
    assert sliced_checkpoint.missing_keys(other, states) == [density]


def _start(run_dir, workers, cpu_replicas, action, step, kind="sharded", faults=None):
    """The processes of ``workers`` workers (1: one process, no cluster) running
    `bank_worker` ``action``; ``faults``: worker -> a fault option of `bank_worker`."""
    ports = load_tool("command_line.py").free_ports(workers) if workers > 1 else []
    processes = []
    for index in range(workers):
        env = dict(os.environ)
        env.pop("TF_CONFIG", None)
        if workers > 1:
            env["TF_CONFIG"] = local_launcher.tf_config(ports, index)
        command = [sys.executable, "-m", "tests.training.bank_worker", str(run_dir), action,
                   str(step), str(cpu_replicas), kind]
        command += [faults[index]] if faults and index in faults else []
        processes.append(subprocess.Popen(command, cwd=ROOT, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return processes


def _finish(processes):
    """[(exit code, output)] of each process, killed past `TIMEOUT_SECONDS`."""
    results = []
    try:
        for process in processes:
            out, _ = process.communicate(timeout=TIMEOUT_SECONDS)
            results.append((process.returncode, out))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    return results


def _run(run_dir, workers, cpu_replicas, action, step, kind="sharded"):
    """Runs the workers to the end; every one must succeed. Returns their outputs."""
    results = _finish(_start(run_dir, workers, cpu_replicas, action, step, kind))
    for code, out in results:
        assert code == 0, out
    return [out for _, out in results]


def _saved_bank(path):
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(KEY.format(name)) for name in FIELDS}


def _assert_bank(state, want):
    for name in FIELDS:
        np.testing.assert_array_equal(state[name], want[name], err_msg=name)


@pytest.fixture(scope="module")
def two_worker_checkpoint(tmp_path_factory):
    """The run directory whose checkpoint 1 two workers of two replicas wrote from
    `bank_worker.bank_state`, each its rows."""
    run_dir = tmp_path_factory.mktemp("two_workers") / "run"
    outputs = _run(run_dir, 2, 2, "fill", 1)
    # Each worker held its replicas' shards of [0, 26), [26, 52), [52, 78), [78, 103).
    assert [out.split("rows ")[-1].split() for out in outputs] == [["0", "52"], ["52", "103"]]
    return run_dir


def test_two_workers_write_one_checkpoint_of_the_whole_bank(two_worker_checkpoint):
    run = RunDirectory(two_worker_checkpoint)
    assert run.checkpoint_paths() == [f"{run.checkpoint_dir}/ckpt-1"]
    _assert_bank(_saved_bank(run.latest_checkpoint()), bank_worker.bank_state())
    # One checkpoint key per field, its rows from both workers; no part left. The files: the
    # chief's dense state and its block, and the other worker's block.
    assert sorted(os.listdir(run.checkpoint_dir)) == [
        "checkpoint", "ckpt-1.data-00000-of-00003", "ckpt-1.data-00001-of-00003",
        "ckpt-1.data-00002-of-00003", "ckpt-1.index"]


@pytest.mark.slow  # three worker processes; make test: one process restores it at 1-4 shards
def test_three_workers_restore_it_bit_for_bit(two_worker_checkpoint, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(two_worker_checkpoint, run_dir)
    outputs = _run(run_dir, 3, 1, "restore", 2)
    assert all(f"restored {RunDirectory(run_dir).checkpoint_dir}/ckpt-1" in out
               for out in outputs)
    _assert_bank(_saved_bank(RunDirectory(run_dir).latest_checkpoint()),
                 bank_worker.bank_state())


@pytest.mark.parametrize("shards", [None, 1, 2, 3, 4])
def test_one_process_restores_it_bit_for_bit(two_worker_checkpoint, shards,
                                            two_replica_strategy, four_replica_strategy):
    """Sharded over 1 to 4 replicas of this process, or replicated (None)."""
    split = (bank_worker.N, bank_worker.D, bank_worker.C, bank_worker.LABELLED,
             bank_worker.labelled_classes())
    if shards is None:
        bank = MemoryBank(*split)
    else:
        devices = [d.name for d in tf.config.list_logical_devices("CPU")[:shards]]
        strategy = {1: tf.distribute.get_strategy(), 2: two_replica_strategy,
                    4: four_replica_strategy}.get(shards) or tf.distribute.MirroredStrategy(
                        devices)
        bank = ShardedMemoryBank(strategy, *split)
    path = RunDirectory(two_worker_checkpoint).latest_checkpoint()
    tf.train.Checkpoint(bank=bank).restore(path).assert_existing_objects_matched()
    _assert_bank({name: getattr(bank, name).numpy() for name in FIELDS},
                 bank_worker.bank_state())


@pytest.mark.slow  # 30 s: two workers, twice, and the wait for the lost one
def test_a_worker_killed_during_a_save_leaves_the_previous_checkpoint_and_the_relaunch_saves(
        two_worker_checkpoint, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(two_worker_checkpoint, run_dir)
    run = RunDirectory(run_dir)
    (chief, chief_out), (killed, _) = _finish(_start(run_dir, 2, 2, "restore", 2,
                                                              faults={1: "--die_after_part"}))
    assert killed == -9
    # The workers' agreement that every part is written fails on the chief.
    assert chief != 0 and "UnavailableError" in chief_out, chief_out
    assert run.checkpoint_paths() == [f"{run.checkpoint_dir}/ckpt-1"]
    # The chief's own part waits where the merge would have read it, and the worker's.
    assert sliced_checkpoint.missing_parts(f"{run.checkpoint_dir}/ckpt-2", 2) == []
    outputs = _run(run_dir, 2, 2, "restore", 2)
    assert ("note: removed the files of unfinished saves, which no checkpoint records, from "
            f"{run.checkpoint_dir}: ckpt-2.parts/\n") in outputs[0]
    assert all(f"restored {run.checkpoint_dir}/ckpt-1" in out for out in outputs)
    assert run.checkpoint_paths() == [f"{run.checkpoint_dir}/ckpt-{n}" for n in (1, 2)]
    _assert_bank(_saved_bank(run.latest_checkpoint()), bank_worker.bank_state())
    assert not [name for name in os.listdir(run.checkpoint_dir) if name.endswith(".parts")]


# Slow: two worker processes. make test keeps a missing part named before any merge
# (test_a_part_without_its_manifest_is_missing_and_a_key_not_merged_is_named).
@pytest.mark.slow
def test_a_part_not_written_fails_the_checkpoint_on_every_worker(two_worker_checkpoint,
                                                                 tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(two_worker_checkpoint, run_dir)
    run = RunDirectory(run_dir)
    results = _finish(_start(run_dir, 2, 2, "restore", 2, faults={1: "--part_fails"}))
    failed = (f"CheckpointWriteFailed: Could not write the checkpoint of step 2 in "
              f"{run.checkpoint_dir} (")
    kept = f"); the previous checkpoint {run.checkpoint_dir}/ckpt-1 is intact."
    for (code, out), reason in zip(results, ("worker 1 could not write its part",
                                             "worker 1: [Errno 28] No space left on device")):
        assert code != 0, out
        assert failed + reason in out and kept in out, out
    assert run.checkpoint_paths() == [f"{run.checkpoint_dir}/ckpt-1"]


def _relaunch_resumes(run_dir, left):
    """Relaunches two workers on ``run_dir``: the chief names the files ``left`` (sorted) as
    it removes them, both restore checkpoint 1 and save checkpoint 2 whole."""
    run = RunDirectory(run_dir)
    outputs = _run(run_dir, 2, 2, "restore", 2)
    assert ("note: removed the files of unfinished saves, which no checkpoint records, from "
            f"{run.checkpoint_dir}: {', '.join(left)}\n") in outputs[0], outputs[0]
    assert all(f"restored {run.checkpoint_dir}/ckpt-1" in out for out in outputs)
    assert run.checkpoint_paths() == [f"{run.checkpoint_dir}/ckpt-{n}" for n in (1, 2)]
    _assert_bank(_saved_bank(run.latest_checkpoint()), bank_worker.bank_state())
    assert sorted(os.listdir(run.checkpoint_dir)) == [
        "checkpoint"] + [f"ckpt-{n}.{suffix}" for n in (1, 2) for suffix in (
            "data-00000-of-00003", "data-00001-of-00003", "data-00002-of-00003", "index")]


@pytest.mark.slow  # 30 s: two workers, twice
@pytest.mark.parametrize("fault, problem", [
    ("--truncate_part", "has {size_less} bytes, its manifest {size}"),
    ("--flip_part_byte", "fails its crc32c")])
def test_a_damaged_part_fails_the_checkpoint_on_every_worker_and_the_relaunch_saves(
        two_worker_checkpoint, tmp_path, fault, problem):
    run_dir = tmp_path / "run"
    shutil.copytree(two_worker_checkpoint, run_dir)
    run = RunDirectory(run_dir)
    results = _finish(_start(run_dir, 2, 2, "restore", 2, faults={1: fault}))
    (chief, chief_out), (worker, worker_out) = results
    assert chief != 0 and worker != 0, (chief_out, worker_out)
    assert "worker 1's part: worker-1.data-00000-of-00001 " in chief_out, chief_out
    data = f"{run.checkpoint_dir}/ckpt-2.parts/worker-1.data-00000-of-00001"
    size = os.path.getsize(data)
    assert problem.format(size_less=size, size=size + 1) in chief_out, chief_out
    assert "the chief could not merge the workers' parts" in worker_out, worker_out
    assert run.checkpoint_paths() == [f"{run.checkpoint_dir}/ckpt-1"]
    _relaunch_resumes(run_dir, ["ckpt-2.parts/"])


@pytest.mark.slow  # 40 s: two workers, twice, and the wait for the lost one
def test_a_worker_killed_between_the_votes_leaves_an_unrecorded_checkpoint_swept_at_relaunch(
        two_worker_checkpoint, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(two_worker_checkpoint, run_dir)
    run = RunDirectory(run_dir)
    (chief, chief_out), (killed, _) = _finish(_start(run_dir, 2, 2, "restore", 2,
                                                     faults={1: "--die_between_votes"}))
    assert killed == -9 and chief != 0, chief_out
    # The chief merged checkpoint 2 whole, but it is not recorded.
    assert run.checkpoint_paths() == [f"{run.checkpoint_dir}/ckpt-1"]
    assert os.path.exists(f"{run.checkpoint_dir}/ckpt-2.index")
    _relaunch_resumes(run_dir, ["ckpt-2.data-00000-of-00003", "ckpt-2.data-00001-of-00003",
                                "ckpt-2.data-00002-of-00003", "ckpt-2.index"])


@pytest.mark.slow  # 40 s: two workers, twice, and the wait for the lost one
def test_a_chief_killed_mid_merge_leaves_a_torn_save_swept_at_relaunch(two_worker_checkpoint,
                                                                       tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(two_worker_checkpoint, run_dir)
    run = RunDirectory(run_dir)
    (chief, _), (worker, worker_out) = _finish(_start(run_dir, 2, 2, "restore", 2,
                                                      faults={0: "--die_mid_merge"}))
    assert chief == -9 and worker != 0, worker_out
    assert run.checkpoint_paths() == [f"{run.checkpoint_dir}/ckpt-1"]
    # One merged data file in place, the rest in the merge's folder; no index in place.
    assert not os.path.exists(f"{run.checkpoint_dir}/ckpt-2.index")
    _relaunch_resumes(run_dir, ["ckpt-2.data-00000-of-00003", "ckpt-2.merging/",
                                "ckpt-2.parts/"])
