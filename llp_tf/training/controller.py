"""The outer training loop, the same for every method and every worker.

`Controller.run` trains epoch by epoch: the method prepares (`Method.before_epoch`), the
epoch's learning rate is set, the method's steps run in loops of ``steps_per_loop``, and the
spent iterator is deleted on another thread (`iterator_release`); it checkpoints every
``checkpoint_every`` steps and at epoch ends, evaluates every ``eval_every`` epochs, runs its
actions after each loop and evaluation, and after each loop stops with a checkpoint
(`TrainingStopped`) when a signal asks. What only the chief writes is decided by the
checkpoints, writer and actions it is given (`assembly`)."""

import dataclasses
import sys
from typing import Any, Callable, Iterator, Optional, Sequence, TextIO

import keras
import tensorflow as tf

from llp_tf.training import iterator_release
from llp_tf.training.checkpoints import RunCheckpoints
from llp_tf.training.epoch_totals import EpochTotals
from llp_tf.training.methods.base import Method, StepRunner
from llp_tf.training.preemption import TrainingStopped
from llp_tf.training.progress import LEARNING_RATE, EpochProgress, RunClock
from llp_tf.training.step_metrics import StepRecords


@dataclasses.dataclass(frozen=True)
class LoopOutput:
    """What a loop gives its actions: ``global_step`` before it, ``steps`` run, and ``metrics``,
    the `StepRecords` of its steps."""

    global_step: int
    steps: int
    metrics: StepRecords


@dataclasses.dataclass(frozen=True)
class EvalOutput:
    """What an evaluation gives its actions: ``row``, the metrics-file line; ``evaluated``, name ->
    float, its metrics; ``phase``, the method's phase of the epoch."""

    row: dict[str, Any]
    evaluated: dict[str, float]
    phase: str


#: An action (Orbit's style), called with a `LoopOutput` or an `EvalOutput`.
Action = Callable[[Any], None]


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """How the controller runs: total ``epochs``, ``steps_per_epoch``, ``global_batch_size``,
    ``steps_per_loop``, ``checkpoint_every`` steps and ``eval_every`` epochs."""

    epochs: int
    steps_per_epoch: int
    global_batch_size: int
    steps_per_loop: int
    checkpoint_every: int
    eval_every: int


class Controller:
    """Owns the outer loop (see the module docstring).

    Args:
      method, runner, settings: the run's `Method`, its `StepRunner`, `LoopSettings`.
      step: int64 [] `tf.Variable`, the global step; totals: `EpochTotals`.
      checkpoints: `RunCheckpoints` (anything with ``save(checkpoint_number)``).
      optimizer, learning_rate: the optimizer's rate is set to ``learning_rate(epoch)``.
      make_iterator: (epoch, start_step) -> iterator of the epoch's remaining global batches.
      evaluate: () -> dict of evaluation metrics; writer: `tf.summary` writer (training run).
      train_actions, eval_actions: `Action`s called with each `LoopOutput` (before its steps
        count) and each `EvalOutput`.
      stop_requested: () -> the signal asking the run to stop, or None.
      stream: where progress is written."""

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
        """Trains ``epoch`` from its step ``start``; returns its evaluation row or None."""
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
        spent = [iterator]
        del iterator
        iterator_release.release(spent)
        epoch_done = epoch + 1
        row = None
        if epoch_done % settings.eval_every == 0 or epoch_done == settings.epochs:
            train_means = self.totals.means(list(self.method.metric_kinds(phase)))
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
            if done < steps:
                progress.update(start + done)

        metrics = self.runner.run(iterator, steps, phase, on_step=on_step)
        for action in self.train_actions:
            action(LoopOutput(global_step, steps, metrics))
        self.step.assign_add(steps)
        global_step += steps
        means = metrics.means()
        self.totals.add(metrics)
        with self.writer.as_default(step=global_step):
            for name, value in means.items():
                tf.summary.scalar(name, value)
            tf.summary.scalar(LEARNING_RATE, learning_rate)
        progress.update(start + steps, means)
        if start + steps < settings.steps_per_epoch:
            if global_step % settings.checkpoint_every == 0:
                self._save(global_step)
            else:
                self._stop_if_requested(global_step)
        return steps

    def _stop_if_requested(self, global_step, saved=None):
        """Raises `TrainingStopped` after a checkpoint if a signal asks to stop."""
        stop_signal = self.stop_requested()
        if stop_signal:
            raise TrainingStopped(global_step, saved or self._save(global_step), stop_signal)

    def _save(self, global_step):
        # Summaries up to the checkpoint reach the disk first: a resume drops those past it.
        self.writer.flush()
        return self.checkpoints.save(checkpoint_number=global_step)
