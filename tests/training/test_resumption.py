"""llp_tf/training/resumption.py: what a rerun says and records before it trains
(`resumption.settle_records`), on a copy of the shared 3-epoch LLP run (5 steps an epoch,
checkpoints at 3, 5, 6, 9, 10, 12, 15; a rerun that trains, test_assembly.py's
test_reruns_say_what_they_did_..., make test-all, reads these lines from a whole run); and a
run resumed with its epoch's totals, whichever layout wrote them: LLP's, stopped mid-epoch
before the step's metrics were typed, kept the mean confidence as two metrics
(confidence_sum / pseudo_labelled), and reports the same epoch means."""

import io
import shutil

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.errors import ConfigError
from llp_tf.training import resumption, run_record
from llp_tf.training.checkpoints import RunCheckpoints
from llp_tf.training.epoch_totals import EpochTotals
from llp_tf.training.methods.llp import LLPMetrics, WarmupMetrics
from llp_tf.training.run_directory import RunDirectory
from llp_tf.training.step_metrics import LOSS, Mean, StepRecords

#: What the old layout held after 3 LLP steps: float64 sums of the steps' records.
OLD_SUMS = {"loss": 21.5, "aggregation": 18.25, "categorisation": 3.0, "weight_decay": 0.375,
            "confidence_sum": 0.9, "pseudo_labelled": 1.2}
STEPS = 3


def _copy(tiny_llp_training, tmp_path):
    config, _ = tiny_llp_training
    return config.replace(run_dir=str(shutil.copytree(config.run_dir, tmp_path / "run")))


def _settle(config, resumed, step, chief=True):
    lines = []
    going_on = resumption.settle_records(config, resumed, step, 5, chief, lines.append)
    return going_on, lines


def test_a_rerun_of_no_more_epochs_than_trained_does_nothing_and_says_so(tiny_llp_training,
                                                                        tmp_path):
    config = _copy(tiny_llp_training, tmp_path)
    run = RunDirectory(config.run_dir)
    started = open(run.config_path).read()
    metrics = run.metrics_path
    assert _settle(config.replace(epochs=2, k=5), True, 15) == (False, [
        f"The run in {config.run_dir} has trained 3 epochs (step 15), more than the 2 asked "
        f"(--epochs=2); nothing was trained or changed. Its metrics are in {metrics}; give "
        "--epochs above 3 to train further."])
    assert _settle(config, True, 15) == (False, [
        f"The run in {config.run_dir} has trained the 3 epochs asked (step 15); nothing to do. "
        f"Its metrics are in {metrics}; raise --epochs to train further."])
    assert open(run.config_path).read() == started
    assert run_record.read_history(config.run_dir) == []
    assert [row["epoch"] for row in run.read_metrics()] == [1, 2, 3]


def test_a_rerun_from_an_earlier_checkpoint_drops_later_rows_and_records_changed_settings(
        tiny_llp_training, tmp_path):
    config = _copy(tiny_llp_training, tmp_path)
    run = RunDirectory(config.run_dir)
    started = open(run.config_path).read()
    history = run.file(run_record.HISTORY_FILE)
    # Resumed from step 12 (the newest checkpoint lost): epoch 3's row, of step 15, goes.
    assert _settle(config.replace(epochs=4, k=5), True, 12) == (True, [
        "Dropped 1 metrics row recorded after step 12, whose checkpoint was lost; they are "
        "recomputed.",
        "Settings changed since the run last trained: epochs: 3 -> 4, k: 3 -> 5; recorded at "
        f"step 12 in {history}."])
    assert [row["epoch"] for row in run.read_metrics()] == [1, 2]
    assert run_record.describe_history(config.run_dir) == ["step 12: epochs: 3 -> 4, k: 3 -> 5"]
    assert open(run.config_path).read() == started
    # Another worker than the chief drops and records nothing.
    other = _copy(tiny_llp_training, tmp_path / "other")
    assert _settle(other.replace(epochs=4), True, 12, chief=False) == (True, [])
    assert [row["epoch"] for row in RunDirectory(other.run_dir).read_metrics()] == [1, 2, 3]
    assert run_record.read_history(other.run_dir) == []


def _llp_totals():
    return EpochTotals([{LOSS: Mean, **WarmupMetrics.kinds()}, {LOSS: Mean, **LLPMetrics.kinds()}])


def _run(tmp_path, totals):
    """(checkpoints, step) of a run in ``tmp_path`` whose items are a step and ``totals``."""
    step = tf.Variable(0, dtype=tf.int64)
    return RunCheckpoints({"step": step, resumption.TOTALS_ITEM: totals}, RunDirectory(tmp_path),
                          keep=3, stream=io.StringIO()), step


def _write_old_layout(tmp_path, sums):
    """A checkpoint of step 40 whose epoch totals are the old ``sums_<name>`` and
    ``count_<name>`` (`STEPS` each) of ``sums``' names, as the old `EpochTotals` wrote them."""
    old = tf.Module(name="epoch_totals")
    old.sums = {name: tf.Variable(value, dtype=tf.float64, name=f"sum_{name}")
                for name, value in sums.items()}
    old.counts = {name: tf.Variable(STEPS, dtype=tf.int64, name=f"count_{name}")
                  for name in sums}
    checkpoint = tf.train.Checkpoint(step=tf.Variable(40, dtype=tf.int64), epoch_totals=old)
    tf.train.CheckpointManager(checkpoint, RunDirectory(tmp_path).checkpoint_dir,
                               max_to_keep=3).save(checkpoint_number=40)


def _start(checkpoints, step, totals):
    return resumption.start(checkpoints, step, totals, method=None, steps_per_epoch=31,
                            afresh=False, log=lambda line: None)


def test_an_old_llp_checkpoint_resumes_with_its_epochs_confidence(tmp_path):
    _write_old_layout(tmp_path, OLD_SUMS)
    totals = _llp_totals()
    checkpoints, step = _run(tmp_path, totals)
    assert _start(checkpoints, step, totals) and int(step.numpy()) == 40
    names = list({LOSS: Mean, **LLPMetrics.kinds()})
    means = totals.means(names)
    assert list(means) == names
    # The old report: each name's mean, confidence = mean(confidence_sum) / mean(pseudo_labelled).
    assert means["confidence"] == (0.9 / STEPS) / (1.2 / STEPS) == pytest.approx(0.75)
    for name in ("loss", "aggregation", "categorisation", "weight_decay", "pseudo_labelled"):
        assert means[name] == OLD_SUMS[name] / STEPS, name
    # The epoch goes on in the new layout: a step of confidence 0.5 over half its rows.
    totals.add(StepRecords({name: np.float32([0.25 if name == "confidence" else 1.0])
                            for name in names}, {"confidence": np.float32([0.5])}))
    assert totals.means(["confidence"])["confidence"] == pytest.approx(
        (0.9 + 0.25) / (1.2 + 0.5), rel=1e-12)


def test_a_new_checkpoint_restores_as_it_was_saved(tmp_path):
    totals = _llp_totals()
    checkpoints, step = _run(tmp_path, totals)
    totals.add(StepRecords({name: np.float32([0.5, 0.25]) for name in totals.sums},
                           {"confidence": np.float32([1.0, 0.5])}))
    checkpoints.save(7)
    resumed = _llp_totals()
    checkpoints, step = _run(tmp_path, resumed)
    assert _start(checkpoints, step, resumed)
    for name in totals.sums:
        assert float(resumed.sums[name].numpy()) == 0.75
        assert int(resumed.counts[name].numpy()) == 2
    assert float(resumed.weights["confidence"].numpy()) == 1.5


def test_an_old_checkpoint_without_the_ratios_terms_does_not_fit(tmp_path):
    _write_old_layout(tmp_path, {name: value for name, value in OLD_SUMS.items()
                                 if name != "pseudo_labelled"})
    totals = _llp_totals()
    checkpoints, step = _run(tmp_path, totals)
    with pytest.raises(ConfigError, match="does not fit"):
        _start(checkpoints, step, totals)
