"""Stopping on SIGTERM or Ctrl-C with a checkpoint (preemption, a time limit, a user).

Either signal becomes a request the controller sees after its current loop of steps; every
worker (requests are summed over workers) then checkpoints at the same step and the run stops
with `TrainingStopped`. After the first SIGINT the previous handler is back, so a second
Ctrl-C aborts at once; an ignored SIGINT stays ignored. docs/multi-worker.md."""

from __future__ import annotations

import signal
import threading
from typing import Optional

import tensorflow as tf

from llp_tf.training import cluster

#: The signals that stop a run with a checkpoint; the first wins when several came.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C (SIGINT)"}


class TrainingStopped(Exception):
    """The run stopped on request after saving a checkpoint: ``step`` (int), ``checkpoint`` (str)
    and the ``signal`` (`signal.Signals`) that asked."""

    def __init__(self, step: int, checkpoint: Optional[str], stop_signal: signal.Signals) -> None:
        super().__init__(f"Stopped by {_NAMES[stop_signal]} at step {step}, after writing the "
                         f"checkpoint {checkpoint}; rerun the same command to resume.")
        self.step = step
        self.checkpoint = checkpoint
        self.signal = stop_signal


class PreemptionWatch:
    """A context manager (in the main thread) that catches SIGTERM and a first SIGINT and says when
    all workers should stop; a multi-worker ``strategy`` sums the requests."""

    def __init__(self, strategy: tf.distribute.Strategy, multi_worker: bool) -> None:
        self.strategy = strategy
        self.multi_worker = bool(multi_worker)
        self.received: set[int] = set()
        self._previous: dict = {}

    def _on_signal(self, signum, frame) -> None:
        del frame
        self.received.add(signum)
        if signum == signal.SIGINT:
            signal.signal(signum, self._previous[signum])

    def __enter__(self) -> "PreemptionWatch":
        if threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                if number == signal.SIGINT and signal.getsignal(number) is signal.SIG_IGN:
                    continue
                self._previous[number] = signal.signal(number, self._on_signal)
        return self

    def __exit__(self, *exc_info) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}

    def stop_requested(self) -> Optional[signal.Signals]:
        """The first signal of `STOP_SIGNALS` that came on any worker, or None; every worker
        calls it together."""
        requests = [1.0 if number in self.received else 0.0 for number in STOP_SIGNALS]
        if self.multi_worker:
            requests = cluster.process_sum(self.strategy)([requests])[0].tolist()
        return next((signal.Signals(number) for number, count in zip(STOP_SIGNALS, requests)
                     if count > 0), None)
