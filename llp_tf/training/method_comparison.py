"""Training methods compared on one regime over several seeds: `train` runs one (method,
seed) as tools/train.py in its own process (a finished run is not trained again), `table`
tabulates each run's last `METRIC`, their mean and spread. Imports no TensorFlow."""

import os
import shlex
import subprocess
from typing import Any, Mapping, Sequence, TextIO

from llp_tf.errors import DataError
from llp_tf.training.run_directory import RunDirectory
from llp_tf.tool_names import tool

#: The last evaluation's validation top-1 of the run's exported model.
METRIC = "val_top1"
#: Other evaluated models whose top-1 the table shows beside it, by metric-name prefix
#: (Mean Teacher's student beside its teacher): row label suffix -> metric.
OTHER_MODELS = {"student": "val_student_top1"}


def table_rows(method: str, row: Mapping[str, Any]) -> dict[str, float]:
    """The table's rows of one run's last evaluation ``row``: {label: top-1}, the method's
    exported model under its name, each of `OTHER_MODELS` the run evaluated as "method
    (student)"."""
    rows = {method: float(row[METRIC])}
    rows.update({f"{method} ({label})": float(row[metric])
                 for label, metric in OTHER_MODELS.items() if metric in row})
    return rows


class ComparisonError(Exception):
    """A run that failed or left no evaluation."""


def run_dir(runs_dir: str, method: str, seed: int) -> str:
    """The run directory of (``method``, ``seed``) in ``runs_dir``."""
    return os.path.join(runs_dir, f"{method}_seed{seed}")


def last_evaluation(directory: str) -> dict[str, Any] | None:
    """The last evaluation row of a run's metrics.jsonl (a torn last line skipped), or None;
    ComparisonError for a damaged file."""
    try:
        rows = RunDirectory(directory).read_metrics(drop_torn_last_line=True)
    except DataError as error:
        raise ComparisonError(str(error)) from None
    rows = [row for row in rows if METRIC in row]
    return rows[-1] if rows else None


def train(train_command: Sequence[str], regime: str, method: str, seed: int | str,
          runs_dir: str, extra_args: Sequence[str], stderr: TextIO) -> dict[str, Any]:
    """The last evaluation of ``train_command`` (tools/train.py) run on ``regime`` for
    (``method``, ``seed``) in its directory of ``runs_dir``, with ``extra_args``."""
    directory = run_dir(runs_dir, method, seed)
    command = [*train_command, f"--regime={regime}", f"--method={method}", f"--seed={seed}",
               f"--run_dir={directory}", *extra_args]
    stderr.write(f"[{method}, seed {seed}] {shlex.join(command[1:])}\n")
    stderr.flush()
    code = subprocess.run(command, check=False).returncode
    row = last_evaluation(directory)
    if code != 0 or row is None:
        raise ComparisonError(f"{method}, seed {seed}: {tool('train')} exited {code}"
                              + ("" if row else " and left no evaluation")
                              + f" (run directory {directory}).")
    return row


def table(results: Mapping[str, Mapping[str, float]], seeds: Sequence[str]) -> str:
    """The Markdown table of ``results`` {method: {seed: val_top1}}."""
    lines = ["| method | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | spread |",
             "| --- |" + " --- |" * (len(seeds) + 2)]
    for method, by_seed in results.items():
        scores = [by_seed[s] for s in seeds]
        lines.append(f"| {method} | " + " | ".join(f"{v:.3f}" for v in scores)
                     + f" | {sum(scores) / len(scores):.3f} | {max(scores) - min(scores):.3f} |")
    return "\n".join(lines)
