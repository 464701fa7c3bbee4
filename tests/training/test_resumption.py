"""A run resumed from its checkpoint with its epoch's totals, whichever layout wrote them:
LLP's, stopped mid-epoch before the step's metrics were typed, kept the mean confidence as
two metrics (confidence_sum / pseudo_labelled); it reports the same epoch means."""

import io

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.errors import ConfigError
from llp_tf.training import resumption
from llp_tf.training.checkpoints import RunCheckpoints
from llp_tf.training.epoch_totals import EpochTotals
from llp_tf.training.methods.llp import LLPMetrics, WarmupMetrics
from llp_tf.training.run_directory import RunDirectory
from llp_tf.training.step_metrics import LOSS, Mean, StepRecords

#: What the old layout held after 3 LLP steps: float64 sums of the steps' records.
OLD_SUMS = {"loss": 21.5, "aggregation": 18.25, "categorisation": 3.0, "weight_decay": 0.375,
            "confidence_sum": 0.9, "pseudo_labelled": 1.2}
STEPS = 3


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
