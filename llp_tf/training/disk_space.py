"""A run on a full file system: `NoSpaceLeft`, one line naming the run directory, its free
space and the space the run needs there, one checkpoint: a run writes each checkpoint whole
beside its newest before it deletes the oldest. Sizes are rounded so that the free space is
never overstated and the space needed never understated. Imports no TensorFlow."""

from __future__ import annotations

import errno
import glob
import math
import os
import shutil
from collections.abc import Callable
from typing import Optional

from llp_tf.errors import LLPError

#: A checkpoint's files beside its variables' bytes (its index and object graph), as a share
#: of those bytes: under 4% for the tests' tiny runs, whose variables are smallest against
#: the graph; a start also writes its split, 16 bytes an example, under 1% of the bank.
CHECKPOINT_OVERHEAD = 0.1
_UNITS = ("bytes", "KB", "MB", "GB", "TB")


class NoSpaceLeft(LLPError):
    """A write of the run found its file system full (or the user's quota used up)."""


def is_full(error: BaseException) -> bool:
    """Whether ``error`` is an OSError of a full file system or an exhausted quota."""
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def free_bytes(path: str) -> int:
    """Bytes free to this user on the file system of ``path`` (or of its nearest existing
    parent folder)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free


def format_bytes(count: int, up: bool) -> str:
    """``count`` bytes in 1024-based units with one decimal ("1.5 MB"), rounded ``up`` or
    down at that decimal."""
    unit = 0
    while count >= 1024 ** (unit + 1) and unit + 1 < len(_UNITS):
        unit += 1
    if unit == 0:
        return f"{count} bytes"
    value = count / 1024 ** unit * 10
    value = (math.ceil(value) if up else math.floor(value)) / 10
    return f"{value:.1f} {_UNITS[unit]}"


def checkpoint_bytes(prefix: str) -> int:
    """Bytes of the files of the checkpoint ``prefix`` (its index and data shards)."""
    return sum(os.path.getsize(path) for path in glob.glob(glob.escape(prefix) + ".*"))


def no_space_left(run_dir: str, needed: int, why: str, fix: str) -> NoSpaceLeft:
    """The error of a run in ``run_dir`` that needs ``needed`` bytes free there: ``why``
    ("to resume: ..."), then ``fix`` ("free that much there ...")."""
    return NoSpaceLeft(
        f"No space left on the device of {run_dir} ({format_bytes(free_bytes(run_dir), False)} "
        f"free): the run needs at least {format_bytes(needed, True)} free there {why}; {fix}.")


def run_without_space(run_dir: str, newest: Optional[str],
                      state_bytes: Callable[[], int]) -> NoSpaceLeft:
    """The error of the run in ``run_dir``: to resume, room for a checkpoint the size of its
    ``newest``; to start (no checkpoint), for ``state_bytes()``, the bytes of the variables of
    the state it would build, and a checkpoint's overhead."""
    if newest:
        return no_space_left(
            run_dir, checkpoint_bytes(newest),
            f"to resume, for its next checkpoint, the size of its newest ({newest})",
            "free that much there, or move the run directory to a disk with room, and rerun "
            "the same command")
    return no_space_left(
        run_dir, int(state_bytes() * (1 + CHECKPOINT_OVERHEAD)), "to start: its settings, "
        "split and first checkpoint (the model, the optimizer and the method's state)",
        "free that much there, or give a --run_dir on a disk with room")
