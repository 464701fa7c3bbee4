"""Renders a `run_analysis.RunAnalysis`: figures, a text summary and a JSON record.

Files written by `write_report` into the output directory:

- ``aggregation_histogram.png``, ``aggregation_trajectory.png``, ``mds.png``:
  the figures of `figures`;
- ``analysis_summary.txt``: `summary.summary_text`;
- ``analysis.json``: `analysis_record`.

All files are first written into a temporary directory next to their
destination and then renamed into place, so an interrupted run leaves no
half-written file.
"""

import json
import math
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

# write_report draws through these names, so that a test can replace one.
from llp_tf.after_training.analysis.figures import draw_histogram, draw_mds, draw_trajectory
from llp_tf.after_training.analysis.summary import summary_text

if TYPE_CHECKING:  # for the annotations only: drawing and reporting need no TensorFlow
    from llp_tf.after_training.analysis.run_analysis import RunAnalysis

HISTOGRAM_FILE = "aggregation_histogram.png"
TRAJECTORY_FILE = "aggregation_trajectory.png"
MDS_FILE = "mds.png"
SUMMARY_FILE = "analysis_summary.txt"
JSON_FILE = "analysis.json"


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
    }


def write_report(analysis: "RunAnalysis", output_dir: str) -> dict[str, str]:
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
