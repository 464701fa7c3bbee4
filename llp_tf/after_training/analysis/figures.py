"""The figures of a `run_analysis.RunAnalysis`, each written to a PNG file on matplotlib's
Agg canvas (no pyplot)."""

import math
from typing import TYPE_CHECKING

import numpy as np

from llp_tf.after_training.analysis.summary import checkpoint_name, class_label
from llp_tf.counted_nouns import counted

if TYPE_CHECKING:
    from llp_tf.after_training.analysis.run_analysis import RunAnalysis

# Above this many classes the trajectory draws a percentile band instead of lines.
MAX_CLASS_LINES = 20
BAND_PERCENTILES = (10, 90)
MIN_BINS, MAX_BINS = 8, 50
HISTOGRAM_HEADROOM = 1.45
FIGURE_DPI = 120
CHECKPOINT_AXIS_PAD_EPOCHS = 0.25
UNLABELLED_MARKER_AREA = 14
LABELLED_MARKER_AREA = 90


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


def draw_histogram(analysis: "RunAnalysis", path: str) -> None:
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
        label = f"{checkpoint_name(state)}: mean {np.mean(scores):.3f}"
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
                   f"({counted(len(analysis.class_names), 'class')})")
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


def draw_trajectory(analysis: "RunAnalysis", path: str) -> None:
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
        detail.set_title(f"Per class at the {counted(len(states), 'kept checkpoint')} "
                         "(dashed: mean)")
        detail.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)


def draw_mds(analysis: "RunAnalysis", path: str) -> None:
    """Writes the MDS scatter: a colour per class, labelled rows larger with an outline."""
    from matplotlib.lines import Line2D  # noqa: PLC0415

    mds = analysis.mds
    figure = _new_figure(8, 6.5)
    axes = figure.add_subplot()
    handles = []
    for colour, c in zip(_class_colours(mds.class_ids.size), mds.class_ids):
        of_class = mds.classes == c
        unlabelled = of_class & ~mds.labelled
        labelled = of_class & mds.labelled
        axes.scatter(mds.coordinates[unlabelled, 0], mds.coordinates[unlabelled, 1], color=colour,
                     s=UNLABELLED_MARKER_AREA, alpha=0.6, linewidths=0)
        axes.scatter(mds.coordinates[labelled, 0], mds.coordinates[labelled, 1], color=colour,
                     s=LABELLED_MARKER_AREA, edgecolors="black", linewidths=1.0, zorder=3)
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
    axes.set_title(f"MDS of bank embeddings, {checkpoint_name(latest)}\n"
                   f"euclidean distance of unit vectors; Stress-1 {mds.stress:.3f}")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
