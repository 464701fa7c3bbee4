"""llp_tf/training/disk_space.py: a full file system told apart, sizes rounded the safe way,
a checkpoint's files measured, the one-line error (the run's own: tests/cli/test_train_tool.py)."""

import collections
import errno

from llp_tf.training import disk_space


def test_only_a_full_file_system_or_quota_is_full():
    assert disk_space.is_full(OSError(errno.ENOSPC, "No space left on device"))
    assert disk_space.is_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not disk_space.is_full(OSError(errno.EACCES, "Permission denied"))
    assert not disk_space.is_full(ValueError("no space"))


def test_sizes_round_up_when_needed_and_down_when_free():
    assert disk_space.format_bytes(1023, up=True) == "1023 bytes"
    assert disk_space.format_bytes(1536, up=True) == disk_space.format_bytes(1536, up=False) \
        == "1.5 KB"
    assert disk_space.format_bytes(1537, up=True) == "1.6 KB"
    assert disk_space.format_bytes(1637, up=False) == "1.5 KB"  # 1.5986 KB
    assert disk_space.format_bytes(666792, up=True) == "651.2 KB"  # 651.164 KB
    assert disk_space.format_bytes(1024 ** 2, up=True) == "1.0 MB"
    assert disk_space.format_bytes(1024 ** 2 - 1, up=True) == "1024.0 KB"
    assert disk_space.format_bytes(5 * 1024 ** 3 + 1, up=True) == "5.1 GB"
    assert disk_space.format_bytes(5 * 1024 ** 3 + 1, up=False) == "5.0 GB"


def test_the_free_space_of_a_missing_folder_is_its_nearest_parents(tmp_path, monkeypatch):
    asked = []
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(disk_space.shutil, "disk_usage",
                        lambda path: asked.append(path) or usage(10, 3, 7))
    assert disk_space.free_bytes(str(tmp_path / "run" / "deeper")) == 7
    assert asked == [str(tmp_path)]


def test_a_checkpoints_bytes_are_its_files_only(tmp_path):
    (tmp_path / "ckpt-12.index").write_bytes(b"x" * 100)
    (tmp_path / "ckpt-12.data-00000-of-00001").write_bytes(b"x" * 5000)
    (tmp_path / "ckpt-120.index").write_bytes(b"x" * 7)
    (tmp_path / "ckpt-12_temp").mkdir()
    assert disk_space.checkpoint_bytes(str(tmp_path / "ckpt-12")) == 5100


def test_the_error_names_the_folder_its_free_space_and_the_space_needed(tmp_path, monkeypatch):
    monkeypatch.setattr(disk_space, "free_bytes", lambda path: 1637)
    error = disk_space.no_space_left(str(tmp_path), 1537, "to start", "free that much")
    assert str(error) == (f"No space left on the device of {tmp_path} (1.5 KB free): the run "
                          "needs at least 1.6 KB free there to start; free that much.")


def test_a_run_needs_its_newest_checkpoints_size_to_resume_else_its_state_to_start(
        tmp_path, monkeypatch):
    monkeypatch.setattr(disk_space, "free_bytes", lambda path: 0)
    (tmp_path / "ckpt-3.index").write_bytes(b"x" * 1024)
    resume = disk_space.run_without_space(str(tmp_path), str(tmp_path / "ckpt-3"),
                                          lambda: 1 / 0)
    assert f"needs at least 1.0 KB free there to resume, for its next checkpoint, the size of " \
           f"its newest ({tmp_path / 'ckpt-3'})" in str(resume)
    start = disk_space.run_without_space(str(tmp_path), None, lambda: 10240)
    assert "needs at least 11.0 KB free there to start: its settings, split and first " \
           "checkpoint" in str(start) and str(start).endswith("a --run_dir on a disk with room.")
