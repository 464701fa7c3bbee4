import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.after_training import (analysis, analysis_figures, analysis_report, mds,
                                   trained_run)
from llp_tf.training import config, run_record
from llp_tf.data import load_source, splits
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
    run_config = trained_run.read_config(run_dir)
    _, used = splits.read_split_indices(os.path.join(run_dir, "split.npz"))
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
    return trained_run.load_run(tiny_llp_run, num_classes=4)


@pytest.fixture(scope="module")
def true_classes(tiny_llp_run):
    return _true_classes(tiny_llp_run)


def test_scores_match_a_float64_reference_on_the_checkpointed_bank(tiny_run, true_classes):
    state = analysis.bank_state(tiny_run, true_classes, steps_per_epoch=5)
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
    state = analysis.bank_state(tiny_run, true_classes, steps_per_epoch=5)
    evaluator = Evaluator(tf.distribute.get_strategy(), tiny_run.model, tiny_run.bank,
                          true_classes, 4)
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
    paths = trained_run.checkpoint_paths(tiny_run.run_dir)
    lines = []
    states = analysis.checkpoint_trajectory(tiny_run, true_classes, 5, report=lines.append)
    assert [s.step for s in states] == [trained_run.checkpoint_step(p) for p in paths]
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
    np.testing.assert_array_equal(tiny_run.bank.embeddings.numpy(),
                                  _bank_tensor(paths[-1], "embeddings"))


def test_metrics_history_keeps_the_last_line_of_a_repeated_epoch(tmp_path):
    lines = [{"epoch": 1, "step": 5, "phase": "warmup", "aggregation_score": 0.1},
             {"epoch": 2, "step": 10, "phase": "llp", "aggregation_score": 0.2},
             {"epoch": 2, "step": 10, "phase": "llp", "aggregation_score": 0.25},
             {"epoch": 3, "step": 15, "phase": "supervised", "top1": 0.5}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    history = analysis.read_metrics_history(str(tmp_path))
    assert [(e.epoch, e.step, e.phase, e.aggregation_score) for e in history] == [
        (1, 5, "warmup", 0.1), (2, 10, "llp", 0.25)]
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1, "aggregation_score": 0.1}\n{"epo')
    with pytest.raises(DataError, match="Line 2 of .*metrics.jsonl is not JSON"):
        analysis.read_metrics_history(str(tmp_path))
    assert analysis.read_metrics_history(str(tmp_path / "missing")) == []


def test_chord_distances_are_euclidean_distances_of_the_unit_rows():
    rows = np.random.default_rng(0).normal(size=(6, 5)) * 3.0
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    expected = np.linalg.norm(unit[:, None, :] - unit[None, :, :], axis=2)
    np.testing.assert_allclose(mds.chord_distances(rows), expected, atol=1e-12)


def test_mds_recovers_a_planar_configuration_exactly():
    # Unit rows on one great circle of a 16-D sphere: their chord distances
    # are those of points on a plane circle, so a 2-D layout fits exactly.
    rng = np.random.default_rng(1)
    basis = np.linalg.qr(rng.normal(size=(16, 2)))[0]  # [16, 2] orthonormal
    angles = rng.uniform(0, 2 * np.pi, 30)
    rows = np.stack([np.cos(angles), np.sin(angles)], axis=1) @ basis.T
    coordinates, stress = mds.mds_2d(rows, seed=0)
    assert coordinates.shape == (30, 2)
    planar = np.linalg.norm(coordinates[:, None] - coordinates[None], axis=2)
    np.testing.assert_allclose(planar, mds.chord_distances(rows), atol=1e-3)
    assert stress < 1e-3


def test_mds_keeps_two_separated_clusters_apart():
    rng = np.random.default_rng(2)
    centre = np.zeros(16)
    centre[0] = 1.0
    rows = np.concatenate([centre + rng.normal(0, 0.08, (40, 16)),
                           -centre + rng.normal(0, 0.08, (40, 16))])
    coordinates, _ = mds.mds_2d(rows, seed=3)
    distances = np.linalg.norm(coordinates[:, None] - coordinates[None], axis=2)
    within = np.concatenate([distances[:40, :40].ravel(), distances[40:, 40:].ravel()])
    assert within.max() < distances[:40, 40:].min()
    # Distance order is kept roughly: rank correlation of all pairs.
    original = mds.chord_distances(rows)[np.triu_indices(80, 1)]
    projected = distances[np.triu_indices(80, 1)]
    ranks = [np.argsort(np.argsort(d)) for d in (original, projected)]
    assert np.corrcoef(*ranks)[0, 1] > 0.8


def test_sample_rows_takes_labelled_rows_first_and_caps_each_class():
    classes = np.array([0] * 10 + [1] * 3 + [2] * 8)
    is_labeled = np.zeros(classes.size, bool)
    is_labeled[[0, 1, 10, 13, 14, 15, 16]] = True  # 2 of class 0, 1 of class 1, 4 of class 2
    rows = mds.sample_rows(classes, is_labeled, [2, 1, 0], points_per_class=3, seed=0)
    assert classes[rows].tolist() == [2, 2, 2, 1, 1, 1, 0, 0, 0]
    assert is_labeled[rows].tolist() == [True] * 3 + [True, False, False] + [True, True, False]
    assert np.unique(rows).size == rows.size
    again = mds.sample_rows(classes, is_labeled, [2, 1, 0], points_per_class=3, seed=0)
    assert rows.tolist() == again.tolist()


def test_choose_classes_is_seeded_and_refuses_too_many():
    counts = np.array([5, 0, 3, 4, 1])
    chosen = mds.choose_classes(counts, 3, seed=4)
    assert chosen.tolist() == sorted(chosen.tolist()) and 1 not in chosen
    assert chosen.tolist() == mds.choose_classes(counts, 3, seed=4).tolist()
    assert mds.choose_classes(counts, 4, seed=0).tolist() == [0, 2, 3, 4]
    with pytest.raises(ConfigError, match="asks for 5 classes.*only 4.*--classes=4"):
        mds.choose_classes(counts, 5, seed=0)


def test_analyze_run_refuses_a_supervised_run(tmp_path):
    run_record.save_config(config.TrainConfig.from_settings(run_dir=str(tmp_path),
                                                      method="supervised"))
    with pytest.raises(ConfigError, match="supervised run, which keeps no memory bank"):
        analysis.analyze_run(str(tmp_path))


def test_analyze_run_and_report_write_valid_files(tiny_llp_run, true_classes, tmp_path):
    result = analysis.analyze_run(tiny_llp_run, num_mds_classes=3, points_per_class=20, seed=1)
    assert [s.step for s in result.trajectory] == [3, 5, 6, 9, 10, 12, 15]
    assert [e.epoch for e in result.history] == [1, 2, 3]
    assert result.latest.step == 15 and result.warmup_epochs == 1
    mds = result.mds
    assert mds.class_ids.size == 3 and mds.coordinates.shape == (60, 2)
    assert mds.classes.tolist() == true_classes[mds.rows].tolist()
    assert int(mds.labeled.sum()) == 12  # 4 labelled per class, all drawn
    assert result.class_names == ("checker", "diagonal", "horizontal", "vertical")

    written = analysis_report.write_report(result, str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path / "out")) == sorted(written)  # no staging left
    for name in ("aggregation_histogram.png", "aggregation_trajectory.png", "mds.png"):
        with open(written[name], "rb") as f:
            content = f.read()
        assert content.startswith(PNG_MAGIC) and len(content) > MIN_PNG_BYTES, name
    with open(written["analysis.json"]) as f:
        record = json.load(f)
    assert record["latest"]["aggregation"]["mean"] == pytest.approx(result.latest.true.mean)
    assert [c["step"] for c in record["checkpoints"]] == [3, 5, 6, 9, 10, 12, 15]
    assert len(record["mds"]["coordinates"]) == 60
    with open(written["analysis_summary.txt"]) as f:
        summary = f.read()
    assert f"mean over 4 classes: {result.latest.true.mean:.4f}" in summary
    best = int(np.nanargmax(result.latest.true.per_class))
    assert f"tightest: {result.class_names[best]} ({best})" in summary


def test_a_failed_report_leaves_earlier_files_untouched(tiny_llp_run, tmp_path, monkeypatch):
    result = analysis.analyze_run(tiny_llp_run, num_mds_classes=2, points_per_class=5,
                                  trajectory=False)
    out = tmp_path / "out"
    out.mkdir()
    (out / "mds.png").write_bytes(b"old")

    def broken(*_):
        raise OSError("disk full")

    monkeypatch.setattr(analysis_report, "draw_mds", broken)
    with pytest.raises(OSError, match="disk full"):
        analysis_report.write_report(result, str(out))
    assert os.listdir(out) == ["mds.png"] and (out / "mds.png").read_bytes() == b"old"


def _synthetic_state(step, rng, num_classes):
    embeddings = rng.normal(size=(10 * num_classes, 8))
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    classes = np.repeat(np.arange(num_classes), 10)
    scores = analysis.aggregation_scores(embeddings, classes, num_classes)
    stats = analysis.PseudoLabelStats(0, math.nan, math.nan, math.nan)
    return analysis.BankState(checkpoint=f"ckpt-{step}", step=step, epoch=step / 10.0,
                              true=scores, pseudo=scores, pseudo_labels=stats,
                              all_rows_score=0.1), embeddings, classes


def test_many_classes_render_and_a_missing_history_is_reported(tmp_path):
    rng = np.random.default_rng(5)
    num_classes = analysis_figures.MAX_CLASS_LINES + 10
    states = [_synthetic_state(step, rng, num_classes) for step in (10, 20)]
    embeddings, classes = states[-1][1], states[-1][2]
    projection = mds.project_classes(embeddings, classes, np.zeros(classes.size, bool), [0, 1],
                                          points_per_class=10, seed=0)
    result = analysis.RunAnalysis(
        run_dir="synthetic", dataset="synthetic",
        class_names=tuple(f"c{i}" for i in range(num_classes)),
        num_rows=classes.size, num_labeled=0, warmup_epochs=0, epochs=2, steps_per_epoch=10,
        latest=states[-1][0], trajectory=[s for s, _, _ in states], history=[], mds=projection,
        mds_seed=0)
    summary = analysis_report.summary_text(result)
    assert "metrics.jsonl holds no aggregation score" in summary
    assert f"mean over {num_classes} classes" in summary
    # More classes than lines: the trajectory draws a percentile band.
    written = analysis_report.write_report(result, str(tmp_path))
    with open(written["aggregation_trajectory.png"], "rb") as f:
        assert f.read(8) == PNG_MAGIC
