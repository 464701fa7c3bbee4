"""Stopping on SIGTERM with a checkpoint: preemption, a scheduler's time limit.

A cluster scheduler (SLURM, Kubernetes, a cloud's spot instances) warns a
job with SIGTERM before it kills it. `PreemptionWatch` turns that signal
into a request the controller sees after its current loop of steps: every
worker then writes a checkpoint at the same global step and the run stops
with `TrainingStopped`; the same command relaunched resumes from it. With
several workers a SIGTERM to any one of them stops them all: the request is
summed over workers (one tiny all-reduce per loop) so that all stop together.

The wait is at most one loop of steps (``--steps_per_loop``): keep a loop
shorter than the scheduler's grace period.
"""

from __future__ import annotations

import signal
import threading
from typing import Optional

import tensorflow as tf

STOP_SIGNALS = (signal.SIGTERM,)


class TrainingStopped(Exception):
    """The run stopped on request after saving a checkpoint (not an error of input).

    Attributes:
      step: int, the global step it stopped at.
      checkpoint: str, the checkpoint it saved there.
    """

    def __init__(self, step: int, checkpoint: Optional[str]) -> None:
        super().__init__(f"Stopped by SIGTERM at step {step}, after writing the checkpoint "
                         f"{checkpoint}; rerun the same command to resume.")
        self.step = step
        self.checkpoint = checkpoint


class PreemptionWatch:
    """Catches SIGTERM while training and says when all workers should stop.

    Use as a context manager around training (in the main thread; elsewhere
    it watches nothing). Args:
      strategy: the run's strategy; a multi-worker one sums the requests.
      multi_worker: bool, whether there are several workers.
    """

    def __init__(self, strategy: tf.distribute.Strategy, multi_worker: bool) -> None:
        self.strategy = strategy
        self.multi_worker = bool(multi_worker)
        self.signalled = False
        self._previous: dict = {}
        self._agree = None

    def _on_signal(self, signum, frame) -> None:
        del signum, frame
        self.signalled = True

    def __enter__(self) -> "PreemptionWatch":
        if threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._on_signal)
        return self

    def __exit__(self, *exc_info) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}

    def stop_requested(self) -> bool:
        """Whether any worker got SIGTERM (every worker must call this together)."""
        if not self.multi_worker:
            return self.signalled
        if self._agree is None:
            strategy = self.strategy

            @tf.function
            def agree(flag):
                per_replica = strategy.run(lambda: tf.identity(flag))
                return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            self._agree = agree
        return float(self._agree(tf.constant(1.0 if self.signalled else 0.0))) > 0
