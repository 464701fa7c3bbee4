"""The text summary of a `run_analysis.RunAnalysis` (`summary_text`), and how classes and
checkpoints are named."""

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from llp_tf.counted_nouns import counted

if TYPE_CHECKING:
    from llp_tf.after_training.analysis.run_analysis import BankState, RunAnalysis

# Classes named in the summary's "tightest" and "loosest" lists.
EXTREME_CLASSES = 3


def class_label(class_names: Sequence[str], class_id: int) -> str:
    """str naming a class: its name, with its number when the two differ."""
    name = str(class_names[class_id])
    return name if name == str(class_id) else f"{name} ({class_id})"


def epoch_text(epoch: float) -> str:
    """``40`` at an epoch's end, ``12.60`` inside one."""
    return str(int(epoch)) if float(epoch).is_integer() else f"{epoch:.2f}"


def checkpoint_name(state: "BankState") -> str:
    """str naming a `run_analysis.BankState`'s checkpoint by its step and epoch."""
    return f"step {state.step} (epoch {epoch_text(state.epoch)})"


def _ranked_classes(scores):
    """Class ids that have rows, from the highest score to the lowest."""
    present = np.flatnonzero(scores.counts > 0)
    return present[np.argsort(-scores.per_class[present], kind="stable")]


def _heading_lines(analysis):
    """The run, its bank and its latest checkpoint."""
    latest = analysis.latest
    return [
        f"Embedding analysis of {analysis.run_dir} ({analysis.dataset}; "
        f"{counted(analysis.num_rows, 'bank row')}, {analysis.num_labelled} labelled, "
        f"{counted(len(analysis.class_names), 'class')})",
        f"Checkpoint {os.path.basename(latest.checkpoint)}: step {latest.step}, epoch "
        f"{epoch_text(latest.epoch)} of {analysis.epochs} (warm-up: the first "
        f"{analysis.warmup_epochs}, "
        "then LLP)",
        "",
    ]


def _score_lines(analysis):
    """The latest checkpoint's mean score, its baseline and the extreme classes."""
    latest = analysis.latest
    scores = latest.true
    ranked = _ranked_classes(scores)
    num_extreme = min(EXTREME_CLASSES, ranked.size)

    def listed(ids):
        return ", ".join(f"{class_label(analysis.class_names, c)} {scores.per_class[c]:.4f}"
                         for c in ids)

    return [
        "Aggregation score (norm of a class's mean bank row; 1 = all its rows at one point):",
        f"  mean over {counted(int((scores.counts > 0).sum()), 'class')}: {scores.mean:.4f} on "
        f"true classes, {latest.pseudo.mean:.4f} on the bank's labels (true + pseudo)",
        f"  all rows pooled as one class: {latest.all_rows_score:.4f} (baseline; close to the "
        "class scores means a collapsed bank, not tight classes)",
        f"  tightest: {listed(ranked[:num_extreme])}",
        f"  loosest:  {listed(ranked[::-1][:num_extreme])}",
    ]


def _trajectory_lines(analysis):
    """The change of the mean and of the classes from the first kept checkpoint to the last."""
    if len(analysis.trajectory) == 1:
        return ["  kept checkpoints: only one, no change to report"]
    if not analysis.trajectory:
        return ["  kept checkpoints: not scored (trajectory skipped)"]
    names = analysis.class_names
    first, last = analysis.trajectory[0], analysis.trajectory[-1]
    change = last.true.per_class - first.true.per_class
    known = np.flatnonzero(~np.isnan(change))
    lines = [f"  kept checkpoints: {checkpoint_name(first)} {first.true.mean:.4f} -> "
             f"{checkpoint_name(last)} {last.true.mean:.4f} "
             f"({last.true.mean - first.true.mean:+.4f})"]
    if known.size:
        gain = known[np.argmax(change[known])]
        loss = known[np.argmin(change[known])]
        lines.append(f"  largest class changes: {class_label(names, gain)} "
                     f"{change[gain]:+.4f}, {class_label(names, loss)} {change[loss]:+.4f}")
    return lines


def _history_line(analysis):
    """The mean score logged at the first, warm-up's last and last epochs, and its highest."""
    history = analysis.history
    if not history:
        return "  per epoch: metrics.jsonl holds no aggregation score"
    points = [history[0]]
    warmup_end = [e for e in history if e.epoch == analysis.warmup_epochs]
    if warmup_end and warmup_end[0] not in (history[0], history[-1]):
        points.append(warmup_end[0])
    if history[-1] is not history[0]:
        points.append(history[-1])
    best = max(history, key=lambda e: e.aggregation_score)
    shown = ", ".join(
        f"epoch {e.epoch}{' (end of warm-up)' if e.epoch == analysis.warmup_epochs else ''}"
        f" {e.aggregation_score:.4f}" for e in points)
    return (f"  per epoch (metrics.jsonl): {shown}; highest {best.aggregation_score:.4f}"
            f" at epoch {best.epoch}")


def _pseudo_label_line(stats):
    """The accuracy, coverage and confidence of a `bank_statistics.PseudoLabelStats`."""
    if not stats.unlabelled:
        return "Pseudo labels: every bank row is labelled; nothing to check."
    if math.isnan(stats.accuracy):
        return (f"Pseudo labels: not yet propagated to the "
                f"{counted(stats.unlabelled, 'unlabelled row')} (the warm-up); nothing to check.")
    return (f"Pseudo labels of the {counted(stats.unlabelled, 'unlabelled row')}: accuracy "
            f"{stats.accuracy:.4f}, coverage {stats.coverage:.4f}, mean confidence "
            f"{stats.confidence:.4f}")


def _mds_line(analysis):
    mds = analysis.mds
    return (f"MDS: {counted(mds.rows.size, 'bank row')} ({int(mds.labelled.sum())} labelled) "
            f"of {'class' if mds.class_ids.size == 1 else 'classes'} "
            f"{', '.join(class_label(analysis.class_names, c) for c in mds.class_ids)}; "
            f"euclidean (chord) distances of the unit rows; Stress-1 {mds.stress:.3f}")


def summary_text(analysis: "RunAnalysis") -> str:
    """A short plain-text report: mean score, extreme classes, changes, pseudo labels."""
    lines = (_heading_lines(analysis) + _score_lines(analysis) + _trajectory_lines(analysis)
             + [_history_line(analysis), _pseudo_label_line(analysis.latest.pseudo_labels),
                _mds_line(analysis)])
    return "\n".join(lines) + "\n"
