"""Stopping on SIGTERM or Ctrl-C with a checkpoint: preemption, a scheduler's
time limit, a user at the terminal.

A cluster scheduler (SLURM, Kubernetes, a cloud's spot instances) warns a
job with SIGTERM before it kills it; a user stops a run with Ctrl-C
(SIGINT). `PreemptionWatch` turns either signal into a request the
controller sees after its current loop of steps: every worker then writes a
checkpoint at the same global step and the run stops with `TrainingStopped`,
which names the signal; the same command relaunched resumes from it. A
second Ctrl-C does not wait: after the first, SIGINT goes back to its
previous handler (Python's raises KeyboardInterrupt), so the run aborts at
once without a checkpoint. A SIGINT ignored already (a shell's background
job) stays ignored. With several workers a signal to any one of them stops
them all: the requests are summed over workers (one tiny all-reduce per
loop) so that all stop together.

The wait is at most one loop of steps (``--steps_per_loop``): keep a loop
shorter than the scheduler's grace period.
"""

from __future__ import annotations

import signal
import threading
from typing import Optional

import tensorflow as tf

#: The signals that stop a run with a checkpoint; the first wins when several came.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C (SIGINT)"}


class TrainingStopped(Exception):
    """The run stopped on request after saving a checkpoint (not an error of input).

    Attributes:
      step: int, the global step it stopped at.
      checkpoint: str, the checkpoint it saved there.
      signal: `signal.Signals`, the signal that asked it to stop.
    """

    def __init__(self, step: int, checkpoint: Optional[str], stop_signal: signal.Signals) -> None:
        super().__init__(f"Stopped by {_NAMES[stop_signal]} at step {step}, after writing the "
                         f"checkpoint {checkpoint}; rerun the same command to resume.")
        self.step = step
        self.checkpoint = checkpoint
        self.signal = stop_signal


class PreemptionWatch:
    """Catches SIGTERM and a first SIGINT while training and says when all
    workers should stop.

    Use as a context manager around training (in the main thread; elsewhere
    it watches nothing). Args:
      strategy: the run's strategy; a multi-worker one sums the requests.
      multi_worker: bool, whether there are several workers.
    """

    def __init__(self, strategy: tf.distribute.Strategy, multi_worker: bool) -> None:
        self.strategy = strategy
        self.multi_worker = bool(multi_worker)
        self.received: set[int] = set()
        self._previous: dict = {}
        self._agree = None

    def _on_signal(self, signum, frame) -> None:
        del frame
        self.received.add(signum)
        if signum == signal.SIGINT:  # a second Ctrl-C aborts at once
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
        """The signal that asks the run to stop, on any worker (the first of
        `STOP_SIGNALS` that came), or None. Every worker must call this together."""
        requests = [1.0 if number in self.received else 0.0 for number in STOP_SIGNALS]
        if self.multi_worker:
            if self._agree is None:
                strategy = self.strategy

                @tf.function
                def agree(flags):
                    per_replica = strategy.run(lambda: tf.identity(flags))
                    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

                self._agree = agree
            requests = self._agree(tf.constant(requests)).numpy().tolist()
        return next((signal.Signals(number) for number, count in zip(STOP_SIGNALS, requests)
                     if count > 0), None)
