"""The run-directory lock: one training process per run directory.

Training (the chief) holds ``run.lock`` while it runs: a ``flock``, released when the holder
dies, plus the holder's host, pid and start for the messages. A live holder is
`RunDirectoryBusy`; a gone one on this host is taken over with a warning; one on another
host is refused (locks may not reach across hosts). docs/training.md, "The run directory"."""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
from typing import Optional, TextIO

from llp_tf.errors import ConfigError, LLPError
from llp_tf.training import disk_space

LOCK_FILE = "run.lock"


class RunDirectoryBusy(LLPError):
    """Another process holds (or may hold) the run directory's lock."""


def _process_is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


def _describe(holder: dict) -> str:
    return (f"process {holder.get('pid', '?')} on host {holder.get('host', '?')} "
            f"(started {holder.get('started', '?')})")


class RunLock:
    """The lock of one run directory; a context manager, or `acquire` and `release`.

    Args:
      run_dir: str, the run directory; created if missing.
      stream: where the takeover warning goes (None: nowhere)."""

    def __init__(self, run_dir: str, stream: Optional[TextIO] = None) -> None:
        self.run_dir = str(run_dir)
        self.path = os.path.join(self.run_dir, LOCK_FILE)
        self.stream = stream
        self._fd: Optional[int] = None
        self._created_dir = False

    def acquire(self) -> "RunLock":
        """Takes the lock.

        Raises:
          RunDirectoryBusy: another live process (or one on another host) holds it.
          ConfigError: the run directory is a file, or cannot be made or written.
          OSError: the file system is full (`disk_space.is_full`); no lock file is left."""
        if os.path.isfile(self.run_dir):
            raise ConfigError("{run_dir} is a file, not a directory: give a --run_dir that is "
                              "a directory, or where one can be made.",
                              settings={"run_dir": self.run_dir})
        if not os.path.isdir(self.run_dir):
            self._open_or_refuse(os.makedirs, self.run_dir)
            self._created_dir = True
        while True:
            fd = self._open_or_refuse(os.open, self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                self._lock_fd(fd)
                # The previous holder may have unlinked the file between our open and lock.
                if os.path.exists(self.path) and \
                        os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        try:
            self._check_previous_holder(fd)
        except BaseException:
            os.close(fd)
            raise
        try:
            self._write_holder(fd)
        except BaseException:
            # Truncated, or half written, under our lock (a full disk): leave no lock file.
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(fd)
            self._remove_created_dir()
            raise
        self._fd = fd
        return self

    def _open_or_refuse(self, make, path, *args):
        """``make(path, *args)``, or a ConfigError naming --run_dir; the OSError of a full file
        system as it is (`disk_space.is_full`), which the run reports with the space needed."""
        try:
            return make(path, *args)
        except OSError as error:
            if disk_space.is_full(error):
                self._remove_created_dir()
                raise
            raise ConfigError(
                "{run_dir} cannot be made or written (" + f"{error.strerror}: {path}); give "
                "a --run_dir in a folder you can write in.",
                settings={"run_dir": self.run_dir}) from None

    def _lock_fd(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return  # No flock on this file system: the holder record decides.
            holder = _read_holder(fd)
            who = _describe(holder) if holder else "another process"
            raise RunDirectoryBusy(
                f"The run directory {self.run_dir} is in use by {who}: one training "
                "process per run directory. Wait for it to finish, stop it, or train in "
                "another --run_dir.") from None

    def _check_previous_holder(self, fd: int) -> None:
        holder = _read_holder(fd)
        if not holder or holder.get("pid") == os.getpid() and \
                holder.get("host") == socket.gethostname():
            return
        if holder.get("host") != socket.gethostname():
            raise RunDirectoryBusy(
                f"The run directory {self.run_dir} is locked by {_describe(holder)}, which "
                "this host cannot check. If that process is gone, delete "
                f"{self.path} and rerun.")
        pid = int(holder.get("pid", -1))
        if not _process_is_gone(pid):
            raise RunDirectoryBusy(
                f"The run directory {self.run_dir} is locked by {_describe(holder)}, which "
                "is still running although its lock is free (a file system without "
                f"working locks?). If it is not training this run, delete {self.path}.")
        if self.stream is not None:
            self.stream.write(f"warning: took over the lock of {self.run_dir} from "
                              f"{_describe(holder)}, which is no longer running.\n")
            self.stream.flush()

    def _write_holder(self, fd: int) -> None:
        holder = {"host": socket.gethostname(), "pid": os.getpid(),
                  "started": datetime.datetime.now().isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        os.fsync(fd)

    def release(self) -> None:
        """Releases the lock and deletes its file (and the run directory if this lock created it
        and it is empty)."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = None
        self._remove_created_dir()

    def _remove_created_dir(self) -> None:
        """Deletes the run directory if this lock created it and it is empty."""
        if self._created_dir:
            with contextlib.suppress(OSError):  # not empty: the run wrote its files
                os.rmdir(self.run_dir)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()


def _read_holder(fd: int) -> dict:
    """The holder record in the lock file ({} if empty or unreadable)."""
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        holder = json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def read_lock_holder(run_dir: str) -> dict:
    """The holder record of a run directory's lock file ({} if there is none)."""
    path = os.path.join(str(run_dir), LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return {}
    try:
        return _read_holder(fd)
    finally:
        os.close(fd)
