"""The outer training loop, the same for every method.

`Controller.run` trains epoch by epoch up to the last step: before an epoch
it asks the method to prepare (`Method.before_epoch`) and sets the epoch's
learning rate; it runs the method's steps in loops of ``steps_per_loop``,
checkpoints every ``checkpoint_every`` steps and at each epoch end, writes
training summaries and progress, and evaluates every ``eval_every`` epochs.
After each loop and each evaluation it runs its actions (`actions.py`: the
NaN guard, the metrics file, the plateau rule). After each loop it asks
whether to stop (`preemption.PreemptionWatch`: SIGTERM or Ctrl-C on any
worker), and then saves a checkpoint and raises `TrainingStopped`. Every
worker of a cluster runs the same loop; what only the chief writes is
decided by the checkpoints, writer and actions it is given (`assembly`).
Nothing in it depends on the method.
"""

import dataclasses
import sys
from typing import Any, Callable, Iterator, Optional, Sequence, TextIO

import keras
import numpy as np
import tensorflow as tf

from llp_tf.training.checkpoints import RunCheckpoints
from llp_tf.training.epoch_totals import EpochTotals
from llp_tf.training.methods.base import Method, StepRunner
from llp_tf.training.preemption import TrainingStopped
from llp_tf.training.progress import LEARNING_RATE, EpochProgress, RunClock


@dataclasses.dataclass(frozen=True)
class LoopOutput:
    """What a loop of steps gives its actions.

    Attributes:
      global_step: int, the global step before the loop.
      steps: int, steps the loop ran.
      metrics: dict name -> float32 [steps], each step's training metric.
    """

    global_step: int
    steps: int
    metrics: dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class EvalOutput:
    """What an evaluation gives its actions.

    Attributes:
      row: dict, the metrics-file line (epoch, step, phase, learning rate,
        the epoch's training means and ``evaluated``), named by the rule of
        `llp_tf.training.metrics`.
      evaluated: dict name -> float, the evaluation's metrics.
      phase: str, the method's phase of the evaluated epoch.
    """

    row: dict[str, Any]
    evaluated: dict[str, float]
    phase: str


#: An action of the controller (Orbit's style): called with a loop's
#: `LoopOutput` (train actions) or an evaluation's `EvalOutput` (eval actions).
Action = Callable[[Any], None]


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """How the controller runs.

    Attributes:
      epochs: int, total epochs.
      steps_per_epoch: int, global batches per epoch.
      global_batch_size: int, for throughput.
      steps_per_loop: int, steps per call of the compiled loop.
      checkpoint_every: int, steps between checkpoints (also at epoch ends).
      eval_every: int, epochs between evaluations (also after the last).
    """

    epochs: int
    steps_per_epoch: int
    global_batch_size: int
    steps_per_loop: int
    checkpoint_every: int
    eval_every: int


class Controller:
    """Owns the outer loop (see the module docstring).

    Args:
      method: the run's `Method`.
      runner: its `StepRunner`.
      settings: `LoopSettings`.
      step: int64 [] `tf.Variable`, the global step (in the checkpoint).
      totals: `EpochTotals` of the training metrics (in the checkpoint).
      checkpoints: `RunCheckpoints` of the run (anything with ``save(checkpoint_number)``).
      optimizer: its ``learning_rate`` is set at each epoch start.
      learning_rate: epoch -> float, read at each epoch start.
      make_iterator: (epoch, start_step) -> distributed iterator of the
        epoch's remaining global batches.
      evaluate: () -> dict of evaluation metrics.
      writer: `tf.summary` writer of the training metrics (`summaries.TRAIN_RUN`:
        their names have no ``val_``).
      train_actions: `Action`s called with each loop's `LoopOutput`, before
        its steps count (the NaN guard).
      eval_actions: `Action`s called with each evaluation's `EvalOutput`.
      stop_requested: () -> the signal asking the run to stop, or None; asked
        after each loop (by every worker at once): a signal saves a checkpoint
        and raises `TrainingStopped`.
      stream: where progress is written.
    """

    def __init__(self, *, method: Method, runner: StepRunner, settings: LoopSettings,
                 step: tf.Variable, totals: EpochTotals, checkpoints: RunCheckpoints,
                 optimizer: keras.optimizers.Optimizer,
                 learning_rate: Callable[[int], float],
                 make_iterator: Callable[[int, int], Iterator],
                 evaluate: Callable[[], dict[str, float]], writer: tf.summary.SummaryWriter,
                 train_actions: Sequence[Action] = (),
                 eval_actions: Sequence[Action] = (),
                 stop_requested: Callable[[], Optional[int]] = lambda: None,
                 stream: Optional[TextIO] = None) -> None:
        self.method = method
        self.runner = runner
        self.settings = settings
        self.step = step
        self.totals = totals
        self.checkpoints = checkpoints
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.make_iterator = make_iterator
        self.evaluate = evaluate
        self.writer = writer
        self.train_actions = list(train_actions)
        self.eval_actions = list(eval_actions)
        self.stop_requested = stop_requested
        self.stream = stream or sys.stdout
        self._clock: Optional[RunClock] = None

    def run(self) -> dict[str, Any]:
        """Trains to the last epoch; returns the last evaluation's row ({} if none ran)."""
        final = {}
        self._clock = RunClock(int(self.step.numpy()),
                               self.settings.epochs * self.settings.steps_per_epoch)
        while True:
            epoch, start = divmod(int(self.step.numpy()), self.settings.steps_per_epoch)
            if epoch >= self.settings.epochs:
                break
            final = self._epoch(epoch, start) or final
        self.writer.flush()
        return final

    def _epoch(self, epoch, start):
        """Trains the rest of ``epoch`` from step ``start`` of it; returns its
        evaluation row, or None if it was not evaluated."""
        settings = self.settings
        phase = self.method.phase(epoch)
        self.method.before_epoch(epoch, phase)
        learning_rate = self.learning_rate(epoch)
        self.optimizer.learning_rate.assign(learning_rate)
        iterator = self.make_iterator(epoch, start)
        progress = EpochProgress(f"epoch {epoch + 1}/{settings.epochs} ({phase})",
                                 settings.steps_per_epoch, settings.global_batch_size, start,
                                 self.stream, run_clock=self._clock,
                                 first_global_step=epoch * settings.steps_per_epoch)
        if start == 0:
            self.totals.reset()
        while start < settings.steps_per_epoch:
            start += self._train_loop(iterator, phase, start, learning_rate, progress)
        epoch_done = epoch + 1
        row = None
        if epoch_done % settings.eval_every == 0 or epoch_done == settings.epochs:
            train_means = self.method.reported(
                self.totals.means(self.method.metric_names(phase)))
            evaluated = self.evaluate()
            row = {"epoch": epoch_done, "step": int(self.step.numpy()), "phase": phase,
                   LEARNING_RATE: learning_rate, **train_means, **evaluated}
            for action in self.eval_actions:
                action(EvalOutput(row, evaluated, phase))
        saved = self._save(int(self.step.numpy()))
        if epoch_done < settings.epochs:
            self._stop_if_requested(int(self.step.numpy()), saved)
        return row

    def _train_loop(self, iterator, phase, start, learning_rate, progress):
        """Runs one loop of steps; returns how many."""
        settings = self.settings
        global_step = int(self.step.numpy())
        to_checkpoint = settings.checkpoint_every - global_step % settings.checkpoint_every
        steps = min(settings.steps_per_loop, settings.steps_per_epoch - start, to_checkpoint)
        def on_step(done):
            if done < steps:  # the loop's last step is reported with its metrics, below
                progress.update(start + done)

        metrics = self.runner.run(iterator, steps, phase, on_step=on_step)
        for action in self.train_actions:
            action(LoopOutput(global_step, steps, metrics))
        self.step.assign_add(steps)
        global_step += steps
        means = self.method.reported({name: float(np.mean(values))
                                      for name, values in metrics.items()})
        self.totals.add(metrics)
        with self.writer.as_default(step=global_step):
            for name, value in means.items():
                tf.summary.scalar(name, value)
            tf.summary.scalar(LEARNING_RATE, learning_rate)
        progress.update(start + steps, means)
        if start + steps < settings.steps_per_epoch:  # epoch ends: see _epoch
            if global_step % settings.checkpoint_every == 0:
                self._save(global_step)
            else:
                self._stop_if_requested(global_step)
        return steps

    def _stop_if_requested(self, global_step, saved=None):
        """Raises `TrainingStopped` after a checkpoint (``saved``, or one written
        now) if a signal asks the run to stop."""
        stop_signal = self.stop_requested()
        if stop_signal:
            raise TrainingStopped(global_step, saved or self._save(global_step), stop_signal)

    def _save(self, global_step):
        # Summaries up to the checkpoint reach the disk first: a resumed run
        # drops those past its checkpoint, and so records every step once.
        self.writer.flush()
        return self.checkpoints.save(checkpoint_number=global_step)
