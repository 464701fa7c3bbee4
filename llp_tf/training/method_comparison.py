"""Training methods compared on one regime over several seeds: `train` runs one (method,
seed) as tools/train.py in its own process (a finished run is not trained again), `table`
tabulates each run's last `METRIC`, their mean and spread.

Table 1 at small scale (`table_one`): each method at each label fraction over several labelled
sets (`--split_seed`), `fraction_summary` gives each method's mean, 95% t interval and labelled
exposure, and each of the paper's orderings tested on the paired differences
(`paired_statistics`); `fraction_table` prints them. Imports no TensorFlow."""

import json
import os
import shlex
import subprocess
from typing import Any, Mapping, Sequence, TextIO

from llp_tf.data.splits import regime as splits
from llp_tf.errors import DataError
from llp_tf.training import paired_statistics, table_one
from llp_tf.training.methods import labelled_exposure
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


def fraction_run_dir(runs_dir: str, fraction: str, method: str, split_seed: int | str) -> str:
    """The run directory of ``method`` at label ``fraction`` on labelled set ``split_seed``."""
    return os.path.join(runs_dir, fraction, f"{method}_split{split_seed}")


def train(train_command: Sequence[str], regime: str, method: str, seed: int | str,
          runs_dir: str, extra_args: Sequence[str], stderr: TextIO,
          directory: str | None = None, flags: Sequence[str] = ()) -> dict[str, Any]:
    """The last evaluation of ``train_command`` (tools/train.py) run on ``regime`` for
    (``method``, ``seed``) in ``directory`` (default: its directory of ``runs_dir``), with
    ``flags`` and then ``extra_args``."""
    directory = directory or run_dir(runs_dir, method, seed)
    command = [*train_command, f"--regime={regime}", f"--method={method}", f"--seed={seed}",
               f"--run_dir={directory}", *flags, *extra_args]
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


def run_exposure(directory: str, row: Mapping[str, Any]) -> float:
    """Passes over each labelled image with its label of the run in ``directory`` up to its
    evaluation ``row`` (`labelled_exposure.exposure`, from its config.json and split)."""
    run = RunDirectory(directory)
    with open(run.config_path) as f:
        config = json.load(f)
    labelled, used = splits.read_split_indices(run.split_path)
    return labelled_exposure.exposure(config, int(row["step"]), len(labelled), len(used))


def _interval_record(interval: paired_statistics.Interval) -> dict[str, Any]:
    return {"mean": interval.mean, "ci95": None if interval.low is None
            else [interval.low, interval.high]}


def fraction_summary(fraction: str, top1: Mapping[str, Mapping[str, float]],
                     exposure: Mapping[str, Mapping[str, float]], split_seeds: Sequence[str],
                     margin: float) -> dict[str, Any]:
    """Every number of one label fraction: per table row (``top1`` {row: {split seed:
    val_top1}}) its values, mean and 95% t interval, per method its labelled exposure
    (``exposure``, likewise); per ordering of `table_one.CLAIMS` whose methods both ran, the
    paired differences over ``split_seeds``, their interval, the relation they show and the
    verdict at ``margin``; and the fraction's overall verdict."""
    rows = {}
    for name, by_seed in top1.items():
        values = [by_seed[s] for s in split_seeds]
        rows[name] = {"val_top1": dict(by_seed),
                      **_interval_record(paired_statistics.t_interval(values))}
        if name in exposure:
            rows[name]["labelled_exposure"] = dict(exposure[name])
    claims = []
    for first, claim, second in table_one.CLAIMS.get(fraction, ()):
        if first not in top1 or second not in top1:
            continue
        differences = {s: top1[first][s] - top1[second][s] for s in split_seeds}
        interval = paired_statistics.t_interval([differences[s] for s in split_seeds])
        claims.append({"claim": f"{first} {claim} {second}", "differences": differences,
                       **_interval_record(interval),
                       "relation": paired_statistics.relation(interval, margin),
                       "verdict": paired_statistics.verdict(claim, interval, margin)})
    return {"labelled_per_class": table_one.labelled_per_class(fraction), "methods": rows,
            "claims": claims,
            "verdict": paired_statistics.overall([c["verdict"] for c in claims])}


def _number(value: float | None, sign: bool = False) -> str:
    return "-" if value is None else (f"{value:+.3f}" if sign else f"{value:.3f}")


def fraction_table(fraction: str, summary: Mapping[str, Any], split_seeds: Sequence[str]) -> str:
    """Markdown of one fraction's `fraction_summary`: a table of the rows (each labelled set,
    mean, 95% interval, mean labelled exposure) and one line per ordering."""
    lines = [f"{fraction}: {summary['labelled_per_class']} labelled images a class",
             "",
             "| method | " + " | ".join(f"set {s}" for s in split_seeds)
             + " | mean | 95% CI | passes over each labelled image |",
             "| --- |" + " --- |" * (len(split_seeds) + 3)]
    for name, row in summary["methods"].items():
        low, high = row["ci95"] or (None, None)
        passes = row.get("labelled_exposure")
        passes = "-" if not passes else f"{sum(passes.values()) / len(passes):.1f}"
        lines.append(f"| {name} | " + " | ".join(_number(row["val_top1"][s])
                                                 for s in split_seeds)
                     + f" | {_number(row['mean'])} | [{_number(low)}, {_number(high)}] | "
                     + f"{passes} |")
    lines.append("")
    for claim in summary["claims"]:
        low, high = claim["ci95"] or (None, None)
        lines.append(f"- {claim['claim']} (paper): difference {_number(claim['mean'], True)}, "
                     f"95% CI [{_number(low, True)}, {_number(high, True)}], shows "
                     f"{claim['relation']}: {claim['verdict']}")
    lines.append(f"- {fraction} as the paper orders it: {summary['verdict']}")
    return "\n".join(lines)
