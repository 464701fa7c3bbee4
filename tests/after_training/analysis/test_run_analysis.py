import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.after_training import run_loader
from llp_tf.after_training.analysis import projector, report, run_analysis
from llp_tf.core import bank_statistics
from llp_tf.core.memory_bank import MemoryBank
from llp_tf.training import config, run_record
from llp_tf.data.sources.registry import load_source
from llp_tf.data.splits import regime
from llp_tf.errors import ConfigError, DataError
from llp_tf.training.evaluation import Evaluator

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# A drawn figure with axes, text and points is tens of kB; an empty or
# broken one is far smaller.
MIN_PNG_BYTES = 10_000


def _bank_tensor(path, name):
    """A bank variable of a checkpoint, read without the code under test."""
    return tf.train.load_checkpoint(path).get_tensor(f"bank/{name}/.ATTRIBUTES/VARIABLE_VALUE")


def _true_classes(run_dir):
    run_config = run_loader.read_config(run_dir)
    _, used = regime.read_split_indices(os.path.join(run_dir, "split.npz"))
    return load_source(run_config.data.dataset, run_config.data.data_dir).train_labels()[used]


def _reference_scores(embeddings, classes, num_classes):
    """float64 [C]: || mean of the rows of class c ||, NaN for an empty class."""
    embeddings = np.asarray(embeddings, np.float64)
    scores = np.full(num_classes, np.nan)
    for c in range(num_classes):
        rows = embeddings[classes == c]
        if len(rows):
            scores[c] = math.sqrt(sum(v * v for v in rows.mean(axis=0)))
    return scores


def _metrics_lines(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def tiny_run(tiny_llp_run):
    return run_loader.load_run(tiny_llp_run, num_classes=4)


@pytest.fixture(scope="module")
def true_classes(tiny_llp_run):
    return _true_classes(tiny_llp_run)


@pytest.mark.parametrize("block_rows", [bank_statistics.SUM_CHUNK_ROWS, 7])
def test_scores_match_a_float64_reference_on_the_checkpointed_bank(tiny_run, true_classes,
                                                                   block_rows, monkeypatch):
    """The bank read whole, and in blocks of 7 rows."""
    monkeypatch.setattr(bank_statistics, "SUM_CHUNK_ROWS", block_rows)
    state = run_analysis.bank_state(tiny_run, true_classes, steps_per_epoch=5)
    embeddings = _bank_tensor(tiny_run.checkpoint, "embeddings")
    labels = _bank_tensor(tiny_run.checkpoint, "labels")
    expected = _reference_scores(embeddings, true_classes, 4)
    assert np.all(np.isfinite(expected)) and np.all((expected > 0) & (expected <= 1))
    np.testing.assert_allclose(state.true.per_class, expected, rtol=0, atol=1e-12)
    assert state.true.counts.tolist() == np.bincount(true_classes, minlength=4).tolist()
    assert state.true.mean == pytest.approx(np.mean(expected), abs=1e-12)
    # The bank's own labels: rows that still hold an instance id are left out.
    np.testing.assert_allclose(state.pseudo.per_class, _reference_scores(embeddings, labels, 4),
                               rtol=0, atol=1e-12)
    assert state.all_rows_score == pytest.approx(
        np.linalg.norm(np.asarray(embeddings, np.float64).mean(axis=0)), abs=1e-12)
    assert state.step == 15 and state.epoch == 3.0


def test_mean_is_the_evaluators_and_the_last_logged_aggregation_score(tiny_run, true_classes):
    state = run_analysis.bank_state(tiny_run, true_classes, steps_per_epoch=5)
    # The evaluator of training reads a live bank, restored from the checkpoint.
    bank = MemoryBank(160, 16, 4, regime.dense_index(tiny_run.used_index, tiny_run.labelled_index),
                      np.zeros(len(tiny_run.labelled_index), np.int64))
    tf.train.Checkpoint(bank=bank).restore(tiny_run.checkpoint).expect_partial()
    evaluator = Evaluator(tf.distribute.get_strategy(), tiny_run.model, bank, true_classes, 4)
    metrics = evaluator.bank_metrics()
    assert state.true.mean == pytest.approx(metrics["aggregation_score"], abs=1e-6)
    assert state.pseudo_labels.accuracy == pytest.approx(metrics["pseudo_label_accuracy"])
    assert state.pseudo_labels.coverage == pytest.approx(metrics["pseudo_label_coverage"])
    # The run evaluates at each epoch end and then checkpoints, bank unchanged.
    last = _metrics_lines(tiny_run.run_dir)[-1]
    assert last["step"] == state.step
    assert state.true.mean == pytest.approx(last["aggregation_score"], abs=1e-6)


def test_trajectory_scores_every_kept_checkpoint_and_restores_the_latest(tiny_run,
                                                                         true_classes):
    paths = run_loader.checkpoint_paths(tiny_run.run_dir)
    lines = []
    states = run_analysis.checkpoint_trajectory(tiny_run, true_classes, 5, report=lines.append)
    assert [s.step for s in states] == [run_loader.checkpoint_step(p) for p in paths]
    assert [s.step for s in states] == [3, 5, 6, 9, 10, 12, 15]
    assert [s.epoch for s in states] == [0.6, 1.0, 1.2, 1.8, 2.0, 2.4, 3.0]
    assert len(lines) == len(paths) and "checkpoint 7/7 (step 15)" in lines[-1]
    for state, path in zip(states, paths):
        np.testing.assert_allclose(
            state.true.per_class,
            _reference_scores(_bank_tensor(path, "embeddings"), true_classes, 4), atol=1e-12)
    # Epoch-end checkpoints hold the bank that was evaluated in metrics.jsonl.
    logged = {line["step"]: line["aggregation_score"] for line in _metrics_lines(tiny_run.run_dir)}
    at_epoch_ends = [s for s in states if s.step in logged]
    assert [s.step for s in at_epoch_ends] == [5, 10, 15]
    for state in at_epoch_ends:
        assert state.true.mean == pytest.approx(logged[state.step], abs=1e-6)
    # The scores move during training, so the restores were real.
    assert len({round(s.true.mean, 6) for s in states}) == len(states)
    assert tiny_run.checkpoint == paths[-1] and tiny_run.step == 15
    np.testing.assert_array_equal(tiny_run.bank["embeddings"],
                                  _bank_tensor(paths[-1], "embeddings"))


def test_metrics_history_keeps_the_last_line_of_a_repeated_epoch(tmp_path):
    lines = [{"epoch": 1, "step": 5, "phase": "warmup", "aggregation_score": 0.1},
             {"epoch": 2, "step": 10, "phase": "llp", "aggregation_score": 0.2},
             {"epoch": 2, "step": 10, "phase": "llp", "aggregation_score": 0.25},
             {"epoch": 3, "step": 15, "phase": "supervised", "val_top1": 0.5}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    history = run_analysis.read_metrics_history(str(tmp_path))
    assert [(e.epoch, e.step, e.phase, e.aggregation_score) for e in history] == [
        (1, 5, "warmup", 0.1), (2, 10, "llp", 0.25)]
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1, "aggregation_score": 0.1}\n{"epo')
    with pytest.raises(DataError, match="Line 2 of .*metrics.jsonl is not JSON"):
        run_analysis.read_metrics_history(str(tmp_path))
    assert run_analysis.read_metrics_history(str(tmp_path / "missing")) == []


def test_analyze_run_refuses_a_supervised_run(tmp_path):
    run_record.save_config(config.TrainConfig.from_settings(run_dir=str(tmp_path),
                                                      method="supervised"))
    with pytest.raises(ConfigError, match="supervised run, which keeps no memory bank"):
        run_analysis.analyze_run(str(tmp_path))


def test_analyze_run_and_report_write_valid_files(tiny_llp_run, true_classes, tmp_path):
    result = run_analysis.analyze_run(tiny_llp_run, num_mds_classes=3, points_per_class=20,
                                      seed=1)
    assert [s.step for s in result.trajectory] == [3, 5, 6, 9, 10, 12, 15]
    assert [e.epoch for e in result.history] == [1, 2, 3]
    assert result.latest.step == 15 and result.warmup_epochs == 1
    mds = result.mds
    assert mds.class_ids.size == 3 and mds.coordinates.shape == (60, 2)
    assert mds.classes.tolist() == true_classes[mds.rows].tolist()
    assert int(mds.labelled.sum()) == 12  # 4 labelled per class, all drawn
    assert result.class_names == ("checker", "diagonal", "horizontal", "vertical")

    written = report.write_report(result, str(tmp_path / "out"))
    # No staging left; a bank smaller than the default sample is written whole.
    assert sorted(os.listdir(tmp_path / "out")) == sorted(
        {name.split(os.sep)[0] for name in written})
    assert sorted(os.listdir(tmp_path / "out" / "projector")) == sorted(projector.FILES)
    assert result.projector.rows.tolist() == list(range(160))
    np.testing.assert_array_equal(result.projector.true_classes, true_classes)
    for name in ("aggregation_histogram.png", "aggregation_trajectory.png", "mds.png"):
        with open(written[name], "rb") as f:
            content = f.read()
        assert content.startswith(PNG_MAGIC) and len(content) > MIN_PNG_BYTES, name
    with open(written["analysis.json"]) as f:
        record = json.load(f)
    assert record["latest"]["aggregation"]["mean"] == pytest.approx(result.latest.true.mean)
    assert [c["step"] for c in record["checkpoints"]] == [3, 5, 6, 9, 10, 12, 15]
    assert len(record["mds"]["coordinates"]) == 60
    assert record["projector"] == {"folder": "projector", "rows": 160, "seed": 1}
    with open(written["analysis_summary.txt"]) as f:
        summary = f.read()
    assert f"mean over 4 classes: {result.latest.true.mean:.4f}" in summary
    best = int(np.nanargmax(result.latest.true.per_class))
    assert f"tightest: {result.class_names[best]} ({best})" in summary

