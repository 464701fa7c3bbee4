"""The controller's `Action`s, called with a loop's `LoopOutput` or an evaluation's
`EvalOutput`: `NanGuard`, `EvaluationLog` and `PlateauRule`."""

import sys
from typing import Callable, Mapping, Optional, TextIO

import numpy as np
import tensorflow as tf

from llp_tf.counted_nouns import counted
from llp_tf.errors import LLPError
from llp_tf.training import summaries
from llp_tf.training.controller import EvalOutput, LoopOutput
from llp_tf.training.metrics import validation_name
from llp_tf.training.progress import format_metrics
from llp_tf.training.run_directory import RunDirectory
from llp_tf.training.schedule import PlateauTracker


class TrainingDiverged(LLPError):
    """The loss became NaN or infinite."""


def log_line(stream: TextIO, message: str) -> None:
    """Writes one line to ``stream`` at once."""
    stream.write(message + "\n")
    stream.flush()


class NanGuard:
    """Raises `TrainingDiverged` when a loop's metrics hold a NaN or infinity, naming ``run_dir``
    and ``latest_checkpoint()``, the last good one."""

    def __init__(self, run_dir: str, latest_checkpoint: Callable[[], Optional[str]]) -> None:
        self.run_dir = run_dir
        self.latest_checkpoint = latest_checkpoint

    def __call__(self, output: LoopOutput) -> None:
        for name, values in output.metrics.values.items():
            bad = ~np.isfinite(values)
            if bad.any():
                at = output.global_step + int(np.argmax(bad)) + 1
                last = self.latest_checkpoint()
                kept = (f"the last good checkpoint ({last}) is kept" if last
                        else "no checkpoint had been written yet")
                raise TrainingDiverged(
                    f"The training {name} became {values[bad][0]} at step {at} (of the "
                    f"{counted(output.steps, 'step')} just run) in {self.run_dir}; {kept}. Lower "
                    "the learning rate or check the data, then rerun the same command to resume.")


class EvaluationLog:
    """Writes each evaluation row to the metrics file of ``run_directory``, TensorBoard
    (``writers``: run name -> writer) and one line of ``stream``."""

    #: Left out of the log line: the same at every evaluation.
    NOT_LOGGED = (validation_name("examples"),)

    def __init__(self, run_directory: RunDirectory,
                 writers: Mapping[str, tf.summary.SummaryWriter],
                 stream: Optional[TextIO] = None) -> None:
        self.run_directory = run_directory
        self.writers = writers
        self.stream = stream or sys.stdout

    def __call__(self, output: EvalOutput) -> None:
        row, evaluated = output.row, output.evaluated
        summaries.write_scalars(self.writers, evaluated, row["step"])
        # Before the epoch's checkpoint: a resume drops those past it.
        for writer in self.writers.values():
            writer.flush()
        self.run_directory.append_metrics(row)
        log_line(self.stream, f"epoch {row['epoch']}: " + format_metrics(
            {name: value for name, value in evaluated.items() if name not in self.NOT_LOGGED}))


class PlateauRule:
    """Feeds ``val_top1`` of the phases ``tracks_plateau`` names to ``tracker``, a
    `schedule.PlateauTracker`, and says on ``stream`` when it drops the learning rate."""

    def __init__(self, tracker: PlateauTracker, tracks_plateau: Callable[[str], bool],
                 drop_factor: float, stream: Optional[TextIO] = None) -> None:
        self.tracker = tracker
        self.tracks_plateau = tracks_plateau
        self.drop_factor = drop_factor
        self.stream = stream or sys.stdout

    def __call__(self, output: EvalOutput) -> None:
        if (self.tracks_plateau(output.phase)
                and self.tracker.update(output.evaluated[validation_name("top1")])):
            log_line(self.stream, "Validation top-1 has plateaued: the learning rate drops "
                                  f"x{self.drop_factor} from the next epoch.")
