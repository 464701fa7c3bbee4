"""Killed, relaunched and doubly launched runs, in real processes.

A run of 4 epochs of 5 steps (2 of instance-recognition warm-up, then LLP),
checkpointed at steps 3, 5, 6, 9, 10, 12, 15, 18 and 20 and evaluated at
each epoch end, is killed with SIGKILL at four points and relaunched each
time (`crash_driver` stops the process at the point; the test kills it
there). It must end identical to an uninterrupted run, bit for bit (the same
operations in the same order), record each epoch once in ``metrics.jsonl`` and each summary step once in TensorBoard, and
take over the lock each killed process left. A second process on a run
directory whose lock is held fails at once and the first finishes unharmed.
"""

import io
import json
import os
import time

import pytest
import tensorflow as tf

from llp_tf.training import run_training
from llp_tf.training.run_directory import RunDirectory
from llp_tf.training.run_lock import LOCK_FILE, RunDirectoryBusy
from tests.runs import DriverProcess, assert_same_state, tiny_config

SETTINGS = dict(warmup_epochs=2, epochs=4, eval_every=1)
EVAL_METRICS = ("val_top1", "val_top5", "val_nn_top1", "pseudo_label_accuracy",
                "aggregation_score")
TRAINING_METRICS = ("loss", "aggregation", "categorisation", "weight_decay", "confidence",
                    "pseudo_labelled")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, stripes):
    config = tiny_config(tmp_path_factory.mktemp("whole"), stripes, **SETTINGS)
    run_training(config, stream=io.StringIO())
    return config.run_dir


def _write_config(tmp_path, stripes):
    config = tiny_config(tmp_path, stripes, **SETTINGS)
    path = str(tmp_path / "config-to-train.json")
    with open(path, "w") as f:
        f.write(config.to_json())
    return config, path


def _summary_steps(run_dir):
    """dict "run/tag" (e.g. "validation/top1") -> list of steps over all of a
    run's TensorBoard event files."""
    steps = {}
    root = RunDirectory(run_dir).tensorboard_dir
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            for record in tf.data.TFRecordDataset(os.path.join(folder, name)):
                event = tf.compat.v1.Event.FromString(record.numpy())
                for value in event.summary.value:
                    key = os.path.join(os.path.relpath(folder, root), value.tag)
                    steps.setdefault(os.path.normpath(key), []).append(event.step)
    return steps


@pytest.mark.slow  # 60 s and 16 s of set-up: five processes and an uninterrupted run
def test_killed_four_times_ends_as_the_uninterrupted_run(tmp_path, stripes, uninterrupted):
    config, config_path = _write_config(tmp_path, stripes)
    run = RunDirectory(config.run_dir)
    points = [("step:8", 6),             # warm-up, between checkpoints 6 and 9
              ("before_save:10", 9),     # epoch 2 evaluated and logged, its checkpoint not
              ("step:14", 12),           # LLP, between checkpoints 12 and 15
              ("after_save:15", 15)]     # right after a checkpoint appears
    killed_pid = None
    for point, last_checkpoint in points:
        driver = DriverProcess(config_path, point)
        driver.wait_until_blocked()
        driver.kill()
        if killed_pid is not None:
            assert f"took over the lock of {config.run_dir} from process {killed_pid}" in \
                driver.text
        killed_pid = driver.process.pid
        assert run.latest_checkpoint().endswith(f"ckpt-{last_checkpoint}"), point
        assert json.load(open(run.file(LOCK_FILE)))["pid"] == killed_pid
    log = io.StringIO()
    run_training(config, stream=log)
    assert f"from process {killed_pid}" in log.getvalue()
    assert not os.path.exists(run.file(LOCK_FILE))

    assert_same_state(config.run_dir, uninterrupted)
    rows, reference = run.read_metrics(), RunDirectory(uninterrupted).read_metrics()
    assert [row["epoch"] for row in rows] == [1, 2, 3, 4]
    assert [row["step"] for row in rows] == [5, 10, 15, 20]
    for row, want in zip(rows, reference):
        # Training means too: a resumed epoch's running sums were checkpointed.
        assert row.keys() == want.keys()
        # (The warm-up's rows have no pseudo-label metrics nor confidence.)
        for name in (k for k in EVAL_METRICS + TRAINING_METRICS if k in want):
            assert row[name] == want[name], (row["epoch"], name)
    steps = _summary_steps(config.run_dir)
    assert steps["validation/top1"] == [5, 10, 15, 20]
    assert sorted(steps["train/loss"]) == [2, 3, 5, 6, 8, 9, 10, 12, 14, 15, 17, 18, 20]
    assert not any(name.endswith("_temp") for name in os.listdir(run.checkpoint_dir))


@pytest.mark.slow
def test_a_second_process_on_a_held_run_directory_fails_and_the_first_finishes(
        tmp_path, stripes, uninterrupted):
    config, config_path = _write_config(tmp_path, stripes)
    driver = DriverProcess(config_path, "step:8")
    try:
        driver.wait_until_blocked()
        started = time.monotonic()
        with pytest.raises(RunDirectoryBusy, match=rf"{config.run_dir} is in use by process "
                                                   rf"{driver.process.pid} on host"):
            run_training(config, stream=io.StringIO())
        assert time.monotonic() - started < 30
        assert driver.resume_and_finish() == 0, driver.text
    finally:
        driver.kill()
    assert "FINISHED" in driver.text
    assert [row["epoch"] for row in RunDirectory(config.run_dir).read_metrics()] == [1, 2, 3, 4]
    assert_same_state(config.run_dir, uninterrupted)
