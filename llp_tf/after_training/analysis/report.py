"""Writes a `run_analysis.RunAnalysis` (`write_report`): the `figures`, the
`summary.summary_text`, analysis.json (`analysis_record`) and the bank for TensorBoard's
projector (`projector`, in its sub-folder), replacing only an earlier report's files."""

import json
import math
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

# write_report draws through these names, so that a test can replace one.
from llp_tf.after_training.analysis import projector
from llp_tf.after_training.analysis.figures import draw_histogram, draw_mds, draw_trajectory
from llp_tf.after_training.analysis.summary import summary_text
from llp_tf.counted_nouns import listed
from llp_tf.errors import ConfigError

if TYPE_CHECKING:
    from llp_tf.after_training.analysis.run_analysis import RunAnalysis

HISTOGRAM_FILE = "aggregation_histogram.png"
TRAJECTORY_FILE = "aggregation_trajectory.png"
MDS_FILE = "mds.png"
SUMMARY_FILE = "analysis_summary.txt"
JSON_FILE = "analysis.json"
REPORT_FILES = (HISTOGRAM_FILE, TRAJECTORY_FILE, MDS_FILE, SUMMARY_FILE, JSON_FILE)
#: The projector's files, by their paths inside the output folder.
PROJECTOR_FILES = tuple(os.path.join(projector.SUBDIR, name) for name in projector.FILES)
#: Keys of analysis.json (`analysis_record`) that mark an earlier report.
REPORT_MARKER = ("run_dir", "bank_rows", "mds")


def _json_float(value):
    """float, or None (JSON null) for NaN."""
    return None if value is None or math.isnan(value) else float(value)


def _json_floats(values):
    return [_json_float(float(v)) for v in values]


def _scores_record(scores):
    return {"mean": _json_float(scores.mean), "per_class": _json_floats(scores.per_class),
            "counts": scores.counts.tolist()}


def _state_record(state):
    stats = state.pseudo_labels
    return {"checkpoint": state.checkpoint, "step": state.step, "epoch": state.epoch,
            "aggregation": _scores_record(state.true),
            "aggregation_pseudo_labels": _scores_record(state.pseudo),
            "all_rows_score": state.all_rows_score,
            "pseudo_labels": {"unlabelled": stats.unlabelled,
                              "accuracy": _json_float(stats.accuracy),
                              "coverage": _json_float(stats.coverage),
                              "confidence": _json_float(stats.confidence)}}


def analysis_record(analysis: "RunAnalysis") -> dict[str, Any]:
    """dict (JSON-ready; NaN as null) of every number of the analysis."""
    mds = analysis.mds
    return {
        "run_dir": analysis.run_dir, "dataset": analysis.dataset,
        "class_names": list(analysis.class_names), "bank_rows": analysis.num_rows,
        "labelled_rows": analysis.num_labelled, "warmup_epochs": analysis.warmup_epochs,
        "epochs": analysis.epochs, "steps_per_epoch": analysis.steps_per_epoch,
        "latest": _state_record(analysis.latest),
        "checkpoints": [_state_record(state) for state in analysis.trajectory],
        "metrics_history": [{"epoch": e.epoch, "step": e.step, "phase": e.phase,
                             "aggregation_score": e.aggregation_score}
                            for e in analysis.history],
        "mds": {"distance": "euclidean between unit-norm bank rows (sqrt(2 - 2 cos))",
                "seed": analysis.mds_seed, "stress1": mds.stress,
                "class_ids": mds.class_ids.tolist(), "bank_rows": mds.rows.tolist(),
                "classes": mds.classes.tolist(), "labelled": mds.labelled.tolist(),
                "coordinates": mds.coordinates.round(6).tolist()},
        "projector": None if analysis.projector is None else {
            "folder": projector.SUBDIR, "rows": int(analysis.projector.rows.size),
            "seed": analysis.projector.seed},
    }


def check_output_dir(output_dir: str) -> None:
    """Raises ConfigError if ``output_dir`` holds `REPORT_FILES` or `PROJECTOR_FILES`
    without an analysis.json holding `REPORT_MARKER`."""
    present = [name for name in REPORT_FILES + PROJECTOR_FILES
               if os.path.lexists(os.path.join(output_dir, name))]
    if not present:
        return
    try:
        with open(os.path.join(output_dir, JSON_FILE)) as f:
            record = json.load(f)
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict) or not set(REPORT_MARKER) <= set(record):
        raise ConfigError(
            f"{output_dir} holds {listed(present)} of no earlier analysis (no {JSON_FILE} "
            "record of one), so the analysis does not replace them: give another --output_dir.")


def write_report(analysis: "RunAnalysis", output_dir: str) -> dict[str, str]:
    """Writes the five files, and the projector's three unless ``analysis.projector`` is
    None (then an earlier report's are removed), into ``output_dir``, each file atomically
    (analysis.json first); returns name (`REPORT_FILES`, `PROJECTOR_FILES`) -> path.
    ConfigError: `check_output_dir`, before anything is written."""
    check_output_dir(output_dir)
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
        names = REPORT_FILES
        if analysis.projector is not None:
            os.mkdir(os.path.join(staging, projector.SUBDIR))
            projector.write_projector(analysis.projector,
                                      os.path.join(staging, projector.SUBDIR))
            names += PROJECTOR_FILES
        written = {name: os.path.join(output_dir, name) for name in names}
        check_output_dir(output_dir)
        if analysis.projector is not None:
            os.makedirs(os.path.join(output_dir, projector.SUBDIR), exist_ok=True)
        for name in (JSON_FILE,) + tuple(n for n in names if n != JSON_FILE):
            os.replace(os.path.join(staging, name), written[name])
        if analysis.projector is None:
            for name in PROJECTOR_FILES:
                if os.path.lexists(os.path.join(output_dir, name)):
                    os.remove(os.path.join(output_dir, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written
