"""A worker lost in the middle of a multi-worker run, said in one line (`WorkerLost`) instead
of TensorFlow's report of dozens, with the checkpoint a relaunch of every worker resumes from."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import tensorflow as tf

from llp_tf.errors import LLPError
from llp_tf.training.run_directory import RunDirectory, checkpoint_step

#: A task named in TensorFlow's report: ``/job:worker/replica:0/task:1``.
_TASK = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")


class WorkerLost(LLPError):
    """Another worker of the cluster stopped while this one trained."""


def lost_worker_message(report: str, run_dir: str, this_task: tuple[str, int]) -> str:
    """The one-line message of a lost worker, from TensorFlow's ``report`` of the failed
    collective, for the run in ``run_dir`` and ``this_task`` (task type, index)."""
    named = sorted({(kind, int(index)) for kind, index in _TASK.findall(report)}
                   - {(this_task[0], int(this_task[1]))})
    lost = " and ".join(f"{kind} {index}" for kind, index in named) or "another worker"
    latest = RunDirectory(run_dir).latest_checkpoint()
    resume = (f"its checkpoint at step {checkpoint_step(latest)} ({latest})" if latest
              else "the start (it has no checkpoint yet)")
    return (f"Lost {lost} of the cluster (killed, out of memory or its node lost), so "
            f"{this_task[0]} {this_task[1]} stopped too. Relaunch every worker with the same "
            f"command: the run resumes from {resume}.")


@contextlib.contextmanager
def report_lost_worker(run_dir: str, this_task: tuple[str, int]) -> Iterator[None]:
    """Raises `WorkerLost` in place of a collective's error a lost worker causes in the block."""
    try:
        yield
    except (tf.errors.UnavailableError, tf.errors.AbortedError) as error:
        if "ollective" not in error.message and not _TASK.search(error.message):
            raise
        raise WorkerLost(lost_worker_message(error.message, run_dir, this_task)) from None
