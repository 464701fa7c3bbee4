"""Renders an `analysis.RunAnalysis`: figures, a text summary and a JSON record.

Files written by `write_report` into the output directory:

- ``aggregation_histogram.png``: histogram of the per-class aggregation
  scores at the latest checkpoint (and the first kept one, for contrast);
- ``aggregation_trajectory.png``: the mean score of every evaluated epoch
  (from ``metrics.jsonl``) with the warm-up / LLP boundary, and the
  per-class scores at the kept checkpoints;
- ``mds.png``: the 2-D MDS of the sampled bank rows, coloured by class,
  labelled rows drawn larger;
- ``analysis_summary.txt``: `summary_text`;
- ``analysis.json``: `analysis_record`.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot, no
display, no global state). All files are first written into a temporary
directory next to their destination and then renamed into place, so an
interrupted run leaves no half-written file.
"""

import json
import math
import os
import shutil
import tempfile

import numpy as np

HISTOGRAM_FILE = "aggregation_histogram.png"
TRAJECTORY_FILE = "aggregation_trajectory.png"
MDS_FILE = "mds.png"
SUMMARY_FILE = "analysis_summary.txt"
JSON_FILE = "analysis.json"

# Classes named in the summary's "tightest" and "loosest" lists.
EXTREME_CLASSES = 3
# Above this many classes the trajectory draws a percentile band instead of
# one line per class (a legend of more entries is unreadable).
MAX_CLASS_LINES = 20
# The band's percentiles when there are too many classes for lines.
BAND_PERCENTILES = (10, 90)
# Histogram bins: about two per sqrt(classes), within these bounds.
MIN_BINS, MAX_BINS = 8, 50
# Room above the tallest bar for the legend.
HISTOGRAM_HEADROOM = 1.45
FIGURE_DPI = 120
# Least padding (epochs) around the checkpoint markers of the trajectory plot.
CHECKPOINT_AXIS_PAD_EPOCHS = 0.25
# Marker areas (points^2) of unlabelled and labelled rows in the MDS plot.
UNLABELED_MARKER_AREA = 14
LABELED_MARKER_AREA = 90


def class_label(class_names, class_id):
    """str naming a class: its name, with its number when the two differ."""
    name = str(class_names[class_id])
    return name if name == str(class_id) else f"{name} ({class_id})"


def _json_float(value):
    """float, or None (JSON null) for NaN."""
    return None if value is None or math.isnan(value) else float(value)


def _json_floats(values):
    return [_json_float(float(v)) for v in values]


def _ranked_classes(scores):
    """Class ids that have rows, from the highest score to the lowest."""
    present = np.flatnonzero(scores.counts > 0)
    return present[np.argsort(-scores.per_class[present], kind="stable")]


def _checkpoint_name(state):
    return f"step {state.step} (epoch {state.epoch:.1f})"


# -- text ---------------------------------------------------------------------


def summary_text(analysis):
    """A short plain-text report: mean score, extreme classes, changes, pseudo labels."""
    names = analysis.class_names
    latest = analysis.latest
    scores = latest.true
    ranked = _ranked_classes(scores)
    num_extreme = min(EXTREME_CLASSES, ranked.size)

    def listed(ids):
        return ", ".join(f"{class_label(names, c)} {scores.per_class[c]:.4f}" for c in ids)

    lines = [
        f"Embedding analysis of {analysis.run_dir} ({analysis.dataset}; {analysis.num_rows} bank "
        f"rows, {analysis.num_labeled} labelled, {len(names)} classes)",
        f"Checkpoint {os.path.basename(latest.checkpoint)}: step {latest.step}, epoch "
        f"{latest.epoch:.1f} of {analysis.epochs} (warm-up: the first {analysis.warmup_epochs}, "
        "then LLP)",
        "",
        "Aggregation score (norm of a class's mean bank row; 1 = all its rows at one point):",
        f"  mean over {int((scores.counts > 0).sum())} classes: {scores.mean:.4f} on true "
        f"classes, {latest.pseudo.mean:.4f} on the bank's labels (true + pseudo)",
        f"  all rows pooled as one class: {latest.all_rows_score:.4f} (baseline; close to the "
        "class scores means a collapsed bank, not tight classes)",
        f"  tightest: {listed(ranked[:num_extreme])}",
        f"  loosest:  {listed(ranked[::-1][:num_extreme])}",
    ]
    if len(analysis.trajectory) >= 2:
        first, last = analysis.trajectory[0], analysis.trajectory[-1]
        change = last.true.per_class - first.true.per_class
        known = np.flatnonzero(~np.isnan(change))
        lines.append(
            f"  kept checkpoints: {_checkpoint_name(first)} {first.true.mean:.4f} -> "
            f"{_checkpoint_name(last)} {last.true.mean:.4f} "
            f"({last.true.mean - first.true.mean:+.4f})")
        if known.size:
            gain = known[np.argmax(change[known])]
            loss = known[np.argmin(change[known])]
            lines.append(f"  largest class changes: {class_label(names, gain)} "
                         f"{change[gain]:+.4f}, {class_label(names, loss)} {change[loss]:+.4f}")
    elif len(analysis.trajectory) == 1:
        lines.append("  kept checkpoints: only one, no change to report")
    else:
        lines.append("  kept checkpoints: not scored (trajectory skipped)")
    history = analysis.history
    if history:
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
        lines.append(f"  per epoch (metrics.jsonl): {shown}; highest {best.aggregation_score:.4f}"
                     f" at epoch {best.epoch}")
    else:
        lines.append("  per epoch: metrics.jsonl holds no aggregation score")
    stats = latest.pseudo_labels
    if stats.unlabeled:
        confidence = ("n/a" if math.isnan(stats.confidence) else f"{stats.confidence:.4f}")
        lines.append(f"Pseudo labels of the {stats.unlabeled} unlabelled rows: accuracy "
                     f"{stats.accuracy:.4f}, coverage {stats.coverage:.4f}, mean confidence "
                     f"{confidence}")
    else:
        lines.append("Pseudo labels: every bank row is labelled; nothing to check.")
    mds = analysis.mds
    lines.append(
        f"MDS: {mds.rows.size} bank rows ({int(mds.labeled.sum())} labelled) of classes "
        f"{', '.join(class_label(names, c) for c in mds.class_ids)}; euclidean (chord) "
        f"distances of the unit rows; Stress-1 {mds.stress:.3f}")
    return "\n".join(lines) + "\n"


def _scores_record(scores):
    return {"mean": _json_float(scores.mean), "per_class": _json_floats(scores.per_class),
            "counts": scores.counts.tolist()}


def _state_record(state):
    stats = state.pseudo_labels
    return {"checkpoint": state.checkpoint, "step": state.step, "epoch": state.epoch,
            "aggregation": _scores_record(state.true),
            "aggregation_pseudo_labels": _scores_record(state.pseudo),
            "all_rows_score": state.all_rows_score,
            "pseudo_labels": {"unlabeled": stats.unlabeled,
                              "accuracy": _json_float(stats.accuracy),
                              "coverage": _json_float(stats.coverage),
                              "confidence": _json_float(stats.confidence)}}


def analysis_record(analysis):
    """dict (JSON-ready; NaN as null) of every number of the analysis."""
    mds = analysis.mds
    return {
        "run_dir": analysis.run_dir, "dataset": analysis.dataset,
        "class_names": list(analysis.class_names), "bank_rows": analysis.num_rows,
        "labeled_rows": analysis.num_labeled, "warmup_epochs": analysis.warmup_epochs,
        "epochs": analysis.epochs, "steps_per_epoch": analysis.steps_per_epoch,
        "latest": _state_record(analysis.latest),
        "checkpoints": [_state_record(state) for state in analysis.trajectory],
        "metrics_history": [{"epoch": e.epoch, "step": e.step, "phase": e.phase,
                             "aggregation_score": e.aggregation_score}
                            for e in analysis.history],
        "mds": {"distance": "euclidean between unit-norm bank rows (sqrt(2 - 2 cos))",
                "seed": analysis.mds_seed, "stress1": mds.stress,
                "class_ids": mds.class_ids.tolist(), "bank_rows": mds.rows.tolist(),
                "classes": mds.classes.tolist(), "labeled": mds.labeled.tolist(),
                "coordinates": mds.coordinates.round(6).tolist()},
    }


# -- figures ------------------------------------------------------------------


def _new_figure(width, height):
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    figure = Figure(figsize=(width, height), dpi=FIGURE_DPI)
    FigureCanvasAgg(figure)
    return figure


def _class_colours(count):
    from matplotlib import colormaps  # noqa: PLC0415

    palette = colormaps["tab10" if count <= 10 else "tab20"]
    return [palette(i % palette.N) for i in range(count)]


def draw_histogram(analysis, path):
    """Writes the histogram of per-class scores (latest, and first kept checkpoint)."""
    latest = analysis.latest
    series = [(latest, "tab:blue")]
    if len(analysis.trajectory) >= 2 and analysis.trajectory[0].step != latest.step:
        series.insert(0, (analysis.trajectory[0], "tab:gray"))
    values = [state.true.per_class[~np.isnan(state.true.per_class)] for state, _ in series]
    pooled = np.concatenate(values)
    num_bins = int(np.clip(2 * math.ceil(math.sqrt(latest.true.per_class.size)),
                           MIN_BINS, MAX_BINS))
    low, high = float(pooled.min()), float(pooled.max())
    margin = max(high - low, 0.02) * 0.05
    edges = np.linspace(max(low - margin, 0.0), high + margin, num_bins + 1)
    figure = _new_figure(7, 4.5)
    axes = figure.add_subplot()
    tallest = 0
    for (state, colour), scores in zip(series, values):
        tallest = max(tallest, int(np.histogram(scores, bins=edges)[0].max()))
        label = f"{_checkpoint_name(state)}: mean {np.mean(scores):.3f}"
        if state is latest:
            axes.hist(scores, bins=edges, color=colour, alpha=0.6, label=label)
        else:  # an outline, so that the latest stays visible behind it
            axes.hist(scores, bins=edges, histtype="step", color=colour, linewidth=2,
                      label=label)
        axes.axvline(np.mean(scores), color=colour, linestyle="--", linewidth=1.5)
    axes.set_xlabel("aggregation score of a class (norm of its mean bank row)")
    axes.set_ylabel("classes")
    axes.yaxis.get_major_locator().set_params(integer=True)
    axes.set_title(f"Per-class aggregation scores, {analysis.dataset} "
                   f"({len(analysis.class_names)} classes)")
    axes.set_ylim(0, tallest * HISTOGRAM_HEADROOM)
    axes.legend(title="checkpoint (dashed: mean)", loc="upper left")
    figure.tight_layout()
    figure.savefig(path)


def _mark_warmup(axes, warmup_epochs, x_min, x_max):
    """Shades the warm-up epochs and draws the LLP boundary when they are in view."""
    if warmup_epochs <= 0:
        return
    if x_min < warmup_epochs:
        axes.axvspan(x_min, min(warmup_epochs, x_max), color="0.9", zorder=0,
                     label="warm-up (instance recognition)")
    if x_min <= warmup_epochs <= x_max:
        axes.axvline(warmup_epochs, color="0.4", linestyle="--", linewidth=1,
                     label=f"LLP starts (after epoch {warmup_epochs})")


def draw_trajectory(analysis, path):
    """Writes the score over training: per-epoch mean, and per class at kept checkpoints."""
    states = analysis.trajectory
    figure = _new_figure(12 if states else 7, 4.8)
    overview = figure.add_subplot(1, 2 if states else 1, 1)
    history = analysis.history
    x_max = max([e.epoch for e in history] + [s.epoch for s in states] + [analysis.latest.epoch])
    if history:
        overview.plot([e.epoch for e in history], [e.aggregation_score for e in history],
                      color="black", marker=".", linewidth=1.5,
                      label="mean over classes (metrics.jsonl, end of epoch)")
    checkpoints = states or [analysis.latest]
    overview.plot([s.epoch for s in checkpoints], [s.true.mean for s in checkpoints],
                  linestyle="none", marker="o", markerfacecolor="none", markeredgecolor="tab:red",
                  markersize=8,
                  label="mean at kept checkpoints" if states else "mean at latest checkpoint")
    right = max(x_max, 1) + CHECKPOINT_AXIS_PAD_EPOCHS  # keeps the last marker whole
    _mark_warmup(overview, analysis.warmup_epochs, 0, right)
    overview.set_xlim(0, right)
    overview.set_xlabel("epoch")
    overview.set_ylabel("aggregation score")
    overview.set_title("Mean aggregation score over training")
    overview.legend(loc="lower right", fontsize=9)
    overview.grid(alpha=0.3)

    if states:
        detail = figure.add_subplot(1, 2, 2)
        epochs = np.array([s.epoch for s in states])
        per_class = np.stack([s.true.per_class for s in states])  # [checkpoints, C]
        present = np.flatnonzero(~np.isnan(per_class).all(axis=0))
        if present.size <= MAX_CLASS_LINES:
            for colour, c in zip(_class_colours(present.size), present):
                detail.plot(epochs, per_class[:, c], marker="o", markersize=4, color=colour,
                            label=class_label(analysis.class_names, c))
            detail.legend(title="class", fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
        else:
            low, high = np.nanpercentile(per_class[:, present], BAND_PERCENTILES, axis=1)
            detail.fill_between(epochs, low, high, color="tab:blue", alpha=0.25,
                                label=f"{BAND_PERCENTILES[0]}-{BAND_PERCENTILES[1]}th "
                                      "percentile of classes")
            detail.plot(epochs, np.nanmedian(per_class[:, present], axis=1), color="tab:blue",
                        marker="o", markersize=4, label="median class")
            detail.legend(fontsize=8, loc="best")
        detail.plot(epochs, [s.true.mean for s in states], color="black", linestyle="--",
                    linewidth=2, zorder=4, label="_mean")
        # Only the span of the kept checkpoints: often the last few epochs.
        pad = max(0.05 * (epochs.max() - epochs.min()), CHECKPOINT_AXIS_PAD_EPOCHS)
        x_min, x_max = epochs.min() - pad, epochs.max() + pad
        _mark_warmup(detail, analysis.warmup_epochs, x_min, x_max)
        detail.set_xlim(x_min, x_max)
        detail.set_xlabel("epoch")
        detail.set_ylabel("aggregation score")
        detail.set_title(f"Per class at the {len(states)} kept checkpoint(s) (dashed: mean)")
        detail.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)


def draw_mds(analysis, path):
    """Writes the MDS scatter: a colour per class, labelled rows larger with an outline."""
    from matplotlib.lines import Line2D  # noqa: PLC0415

    mds = analysis.mds
    figure = _new_figure(8, 6.5)
    axes = figure.add_subplot()
    handles = []
    for colour, c in zip(_class_colours(mds.class_ids.size), mds.class_ids):
        of_class = mds.classes == c
        unlabeled = of_class & ~mds.labeled
        labeled = of_class & mds.labeled
        axes.scatter(mds.coordinates[unlabeled, 0], mds.coordinates[unlabeled, 1], color=colour,
                     s=UNLABELED_MARKER_AREA, alpha=0.6, linewidths=0)
        axes.scatter(mds.coordinates[labeled, 0], mds.coordinates[labeled, 1], color=colour,
                     s=LABELED_MARKER_AREA, edgecolors="black", linewidths=1.0, zorder=3)
        handles.append(Line2D([], [], linestyle="none", marker="o", color=colour, markersize=8,
                              label=f"{class_label(analysis.class_names, c)} "
                                    f"({int(of_class.sum())})"))
    handles.append(Line2D([], [], linestyle="none", label=" "))
    handles.append(Line2D([], [], linestyle="none", marker="o", color="0.6", markersize=4,
                          label="unlabelled"))
    handles.append(Line2D([], [], linestyle="none", marker="o", color="0.6", markersize=9,
                          markeredgecolor="black", label="labelled"))
    axes.legend(handles=handles, title="class (rows)", loc="center left",
                bbox_to_anchor=(1.01, 0.5), fontsize=9)
    axes.set_aspect("equal", adjustable="datalim")
    axes.set_xlabel("MDS dimension 1")
    axes.set_ylabel("MDS dimension 2")
    latest = analysis.latest
    axes.set_title(f"MDS of bank embeddings, {_checkpoint_name(latest)}\n"
                   f"euclidean distance of unit vectors; Stress-1 {mds.stress:.3f}")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)


# -- writing ------------------------------------------------------------------


def write_report(analysis, output_dir):
    """Writes the five files (module docstring) into ``output_dir`` atomically.

    Returns:
      dict of file name -> written path, in writing order.
    """
    os.makedirs(output_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".analysis-", dir=output_dir)
    try:
        draw_histogram(analysis, os.path.join(staging, HISTOGRAM_FILE))
        draw_trajectory(analysis, os.path.join(staging, TRAJECTORY_FILE))
        draw_mds(analysis, os.path.join(staging, MDS_FILE))
        with open(os.path.join(staging, SUMMARY_FILE), "w") as f:
            f.write(summary_text(analysis))
        with open(os.path.join(staging, JSON_FILE), "w") as f:
            json.dump(analysis_record(analysis), f, indent=1)
            f.write("\n")
        written = {}
        for name in (HISTOGRAM_FILE, TRAJECTORY_FILE, MDS_FILE, SUMMARY_FILE, JSON_FILE):
            written[name] = os.path.join(output_dir, name)
            os.replace(os.path.join(staging, name), written[name])
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written
