"""The run-directory lock: held, busy, released, taken over from a dead holder; a
run directory that cannot be one refused."""

import errno
import io
import json
import os
import socket
import subprocess
import sys

import pytest

from llp_tf.errors import ConfigError
from llp_tf.training.run_lock import LOCK_FILE, RunDirectoryBusy, RunLock, read_lock_holder

HOLDER_TIMEOUT_SECONDS = 60

# A process that takes the lock, says so, and holds it until killed.
HOLD = """
import sys, time
from llp_tf.training.run_lock import RunLock
lock = RunLock(sys.argv[1]).acquire()
print("HELD", flush=True)
time.sleep(120)
"""


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=HOLDER_TIMEOUT_SECONDS)
    return process.pid


def test_lock_records_its_holder_and_release_removes_it(tmp_path):
    run_dir = tmp_path / "run"
    with RunLock(str(run_dir)) as lock:
        assert lock.held
        holder = read_lock_holder(str(run_dir))
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        (run_dir / "config.json").write_text("{}")
    assert not lock.held and not (run_dir / LOCK_FILE).exists()
    assert (run_dir / "config.json").exists()


def test_a_lock_that_created_the_directory_removes_it_when_nothing_was_written(tmp_path):
    with RunLock(str(tmp_path / "run")):
        pass
    assert not (tmp_path / "run").exists()
    (tmp_path / "kept").mkdir()
    with RunLock(str(tmp_path / "kept")):
        pass
    assert (tmp_path / "kept").is_dir()


def test_a_second_lock_on_a_held_directory_is_refused_naming_the_holder(tmp_path):
    with RunLock(str(tmp_path)):
        with pytest.raises(RunDirectoryBusy,
                           match=rf"{tmp_path} is in use by process {os.getpid()} on host "
                                 rf"{socket.gethostname()} \(started .*\)"):
            RunLock(str(tmp_path)).acquire()
    with RunLock(str(tmp_path)):  # free again
        pass


def test_the_lock_of_another_process_holds_until_it_is_killed_then_is_taken_over(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "HELD"
        with pytest.raises(RunDirectoryBusy, match=f"in use by process {holder.pid} on host"):
            RunLock(str(tmp_path)).acquire()
    finally:
        holder.kill()
        holder.wait(timeout=HOLDER_TIMEOUT_SECONDS)
    warnings = io.StringIO()
    with RunLock(str(tmp_path), stream=warnings):
        assert read_lock_holder(str(tmp_path))["pid"] == os.getpid()
    assert f"took over the lock of {tmp_path} from process {holder.pid}" in warnings.getvalue()
    assert "no longer running" in warnings.getvalue()


def test_a_stale_lock_file_of_a_gone_process_is_taken_over(tmp_path):
    pid = _dead_pid()
    (tmp_path / LOCK_FILE).write_text(json.dumps(
        {"host": socket.gethostname(), "pid": pid, "started": "2026-01-01T00:00:00"}))
    warnings = io.StringIO()
    with RunLock(str(tmp_path), stream=warnings):
        pass
    assert f"from process {pid} on host {socket.gethostname()}" in warnings.getvalue()


def test_a_lock_file_of_a_live_process_or_another_host_is_refused(tmp_path):
    (tmp_path / LOCK_FILE).write_text(json.dumps({"host": "node-17", "pid": 4242}))
    with pytest.raises(RunDirectoryBusy, match=rf"locked by process 4242 on host node-17.*"
                                               rf"delete {tmp_path / LOCK_FILE}"):
        RunLock(str(tmp_path)).acquire()
    # A live pid on this host whose flock is free: the file system has no locks.
    (tmp_path / LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": 1}))
    with pytest.raises(RunDirectoryBusy, match="still running although its lock is free"):
        RunLock(str(tmp_path)).acquire()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == 1  # left as it was


def test_a_run_dir_that_is_a_file_is_a_config_error(tmp_path):
    (tmp_path / "file").write_text("kept")
    with pytest.raises(ConfigError) as raised:
        RunLock(str(tmp_path / "file")).acquire()
    assert str(raised.value) == (f"--run_dir={tmp_path / 'file'} is a file, not a directory: "
                                 "give a --run_dir that is a directory, or where one can be made.")
    assert (tmp_path / "file").read_text() == "kept"
    with pytest.raises(ConfigError, match=f"--run_dir={tmp_path / 'file' / 'run'} cannot be made "
                                          r"or written \(Not a directory: "):
        RunLock(str(tmp_path / "file" / "run")).acquire()


def test_a_run_dir_that_cannot_be_written_is_a_config_error(read_only_folder):
    with pytest.raises(ConfigError) as raised:
        RunLock(str(read_only_folder)).acquire()
    assert str(raised.value.with_origins({"run_dir": "command line"})) == (
        f"--run_dir={read_only_folder} (command line) cannot be made or written (Permission "
        f"denied: {read_only_folder / LOCK_FILE}); give a --run_dir in a folder you can write in.")
    assert os.listdir(read_only_folder) == []


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_leaves_no_lock_file_and_no_directory_the_lock_made(tmp_path, monkeypatch):
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "config.json").write_text("{}")
    # A lock left by a dead process, taken over and then not written.
    (kept / LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(),
                                              "pid": _dead_pid(), "started": "then"}))
    monkeypatch.setattr(os, "pwrite", _full_disk)  # the holder record, after its truncation
    for run_dir in (tmp_path / "new", kept):
        with pytest.raises(OSError) as raised:
            RunLock(str(run_dir)).acquire()
        assert raised.value.errno == errno.ENOSPC
    assert not (tmp_path / "new").exists()
    assert sorted(os.listdir(kept)) == ["config.json"]
    monkeypatch.undo()
    with RunLock(str(kept)) as lock:  # and the next start takes the lock as usual
        assert lock.held and read_lock_holder(str(kept))["pid"] == os.getpid()


def test_a_run_directory_a_full_disk_cannot_make_is_the_disks_error(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "makedirs", _full_disk)
    with pytest.raises(OSError) as raised:
        RunLock(str(tmp_path / "run")).acquire()
    assert raised.value.errno == errno.ENOSPC and not isinstance(raised.value, ConfigError)
