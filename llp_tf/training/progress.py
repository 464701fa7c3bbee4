"""Progress of an epoch: a live bar on a terminal; elsewhere (a file, a pipe, ``CI``) a plain
line at most every ``log_every_seconds`` and at the epoch's end. Metrics as printed: in a line
(`format_metrics`) or the run's final table (`format_table`)."""

import numbers
import os
import sys
import time
from typing import Any, Mapping, Optional, TextIO

#: The metric printed to more significant digits than the others.
LEARNING_RATE = "learning_rate"


def format_value(name: str, value: Any) -> str:
    """A metric's value as printed: integers as integers, ``learning_rate`` to 6 significant
    digits, other floats to 4 (``1.000``), anything else as ``str``."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return format(float(value), ".6g" if name == LEARNING_RATE else "#.4g")
    return str(value)


def format_metrics(metrics: Mapping[str, Any]) -> str:
    """``"name value name value ..."`` of ``metrics`` in order (`format_value`)."""
    return " ".join(f"{name} {format_value(name, value)}" for name, value in metrics.items())


def format_table(metrics: Mapping[str, Any]) -> str:
    """A two-column text table of metric name and value (`format_value`)."""
    width = max(len(name) for name in metrics)
    lines = [f"{'metric'.ljust(width)}  value", f"{'-' * width}  ------"]
    for name, value in metrics.items():
        lines.append(f"{name.ljust(width)}  {format_value(name, value)}")
    return "\n".join(lines)


def is_interactive(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal a progress bar can redraw (never under CI)."""
    return hasattr(stream, "isatty") and stream.isatty() and not os.environ.get("CI")


def _format_duration(seconds):
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes:02d}:{seconds:02d}"


class RunClock:
    """The whole run's pace, for its ETA: time per step since this process started, from
    ``start_step`` to ``total_steps``."""

    def __init__(self, start_step: int, total_steps: int) -> None:
        self.start_step = int(start_step)
        self.total_steps = int(total_steps)
        self._start = time.monotonic()

    def remaining(self, global_step: int, now: float) -> Optional[float]:
        """Seconds the run needs after ``global_step`` at this pace (None before a first step)."""
        done = int(global_step) - self.start_step
        if done <= 0:
            return None
        return (self.total_steps - int(global_step)) * (now - self._start) / done


class EpochProgress:
    """Reports the steps of one epoch.

    Args:
      description: str, e.g. "epoch 3/10 (llp)"; total_steps: int, steps in the epoch.
      images_per_step: int, the global batch size; start_step: int, steps already done.
      stream: where to write (stdout); log_every_seconds: float, between plain lines.
      run_clock: `RunClock`, for the run's ETA; first_global_step: of the epoch's step 0."""

    BAR_WIDTH = 20

    def __init__(self, description: str, total_steps: int, images_per_step: int,
                 start_step: int = 0, stream: Optional[TextIO] = None,
                 log_every_seconds: float = 30.0, run_clock: Optional[RunClock] = None,
                 first_global_step: int = 0) -> None:
        self.description = description
        self.total_steps = int(total_steps)
        self.images_per_step = int(images_per_step)
        self.stream = stream or sys.stdout
        self.interactive = is_interactive(self.stream)
        self.log_every_seconds = float(log_every_seconds)
        self.step = int(start_step)
        self._start_step = int(start_step)
        self.run_clock = run_clock
        self.first_global_step = int(first_global_step)
        self._metrics: Mapping[str, float] = {}
        self._start = time.monotonic()
        self._last_log = self._start

    def update(self, step: int, metrics: Optional[Mapping[str, float]] = None) -> None:
        """``step`` steps of the epoch are done; metrics: name -> float, or None inside a loop."""
        self.step = int(step)
        if metrics is not None:
            self._metrics = dict(metrics)
        metrics = self._metrics
        now = time.monotonic()
        done = self.step >= self.total_steps
        if self.interactive:
            self.stream.write("\r" + self._line(metrics, now) + ("\n" if done else ""))
            self.stream.flush()
        elif done or now - self._last_log >= self.log_every_seconds:
            self.stream.write(self._line(metrics, now) + "\n")
            self.stream.flush()
            self._last_log = now

    def _line(self, metrics, now):
        elapsed = now - self._start
        steps_done = self.step - self._start_step
        rate = steps_done * self.images_per_step / elapsed if elapsed > 0 else 0.0
        remaining = ((self.total_steps - self.step) * elapsed / steps_done
                     if steps_done > 0 else 0.0)
        filled = int(self.BAR_WIDTH * self.step / max(self.total_steps, 1))
        bar = "#" * filled + "." * (self.BAR_WIDTH - filled)
        terms = format_metrics(metrics)
        timing = (f"{rate:.0f} img/s ETA {_format_duration(remaining)}"
                  if self.step < self.total_steps else f"{rate:.0f} img/s "
                  f"in {_format_duration(elapsed)}")
        run_left = (self.run_clock.remaining(self.first_global_step + self.step, now)
                    if self.run_clock else None)
        if run_left:
            timing += f", run ETA {_format_duration(run_left)}"
        return (f"{self.description} [{bar}] {self.step}/{self.total_steps} {terms} "
                f"{timing}")
