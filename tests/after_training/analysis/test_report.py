import math
import os

import numpy as np
import pytest

from llp_tf.after_training.analysis import figures, mds, report, run_analysis
from llp_tf.after_training.analysis.summary import summary_text
from llp_tf.core import bank_statistics
from tests.runs import file_contents

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_a_failed_report_leaves_earlier_files_untouched(tiny_llp_run, tmp_path, monkeypatch):
    result = run_analysis.analyze_run(tiny_llp_run, num_mds_classes=2, points_per_class=5,
                                      trajectory=False)
    out = tmp_path / "out"
    report.write_report(result, str(out))
    earlier = file_contents(out)

    def broken(*_):
        raise OSError("disk full")

    monkeypatch.setattr(report, "draw_mds", broken)
    with pytest.raises(OSError, match="disk full"):
        report.write_report(result, str(out))
    assert file_contents(out) == earlier


def _synthetic_state(step, rng, num_classes):
    embeddings = rng.normal(size=(10 * num_classes, 8))
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    classes = np.repeat(np.arange(num_classes), 10)
    scores = bank_statistics.aggregation_scores(embeddings, classes, num_classes)
    stats = bank_statistics.PseudoLabelStats(0, math.nan, math.nan, math.nan)
    return run_analysis.BankState(checkpoint=f"ckpt-{step}", step=step, epoch=step / 10.0,
                                  true=scores, pseudo=scores, pseudo_labels=stats,
                                  all_rows_score=0.1), embeddings, classes


def test_many_classes_render_and_a_missing_history_is_reported(tmp_path):
    rng = np.random.default_rng(5)
    num_classes = figures.MAX_CLASS_LINES + 10
    states = [_synthetic_state(step, rng, num_classes) for step in (10, 20)]
    embeddings, classes = states[-1][1], states[-1][2]
    projection = mds.project_classes(lambda rows: embeddings[rows], classes,
                                     np.zeros(classes.size, bool), [0, 1], points_per_class=10,
                                     seed=0)
    result = run_analysis.RunAnalysis(
        run_dir="synthetic", dataset="synthetic",
        class_names=tuple(f"c{i}" for i in range(num_classes)),
        num_rows=classes.size, num_labelled=0, warmup_epochs=0, epochs=2, steps_per_epoch=10,
        latest=states[-1][0], trajectory=[s for s, _, _ in states], history=[], mds=projection,
        mds_seed=0)
    summary = summary_text(result)
    assert "metrics.jsonl holds no aggregation score" in summary
    assert f"mean over {num_classes} classes" in summary
    # More classes than lines: the trajectory draws a percentile band.
    written = report.write_report(result, str(tmp_path))
    with open(written["aggregation_trajectory.png"], "rb") as f:
        assert f.read(8) == PNG_MAGIC
