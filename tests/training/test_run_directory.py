"""The run directory: its files, the metrics file, the checkpoint manager."""

import os

import pytest
import tensorflow as tf

from llp_tf.errors import ConfigError, DataError
from llp_tf.training.run_directory import RunDirectory, checkpoint_step, start_afresh
from tests.runs import file_contents


def test_layout(tmp_path):
    run = RunDirectory(tmp_path / "run")
    assert run.config_path == str(tmp_path / "run" / "config.json")
    assert run.split_path.endswith("run/split.npz")
    assert run.checkpoint_dir.endswith("run/checkpoints")
    assert run.metrics_path.endswith("run/metrics.jsonl")
    assert run.tensorboard_dir.endswith("run/tensorboard")


def test_metrics_are_appended_and_read_in_order(tmp_path):
    run = RunDirectory(tmp_path / "run")
    assert run.read_metrics() == []
    rows = [{"epoch": 1, "top1": 0.25}, {"epoch": 2, "top1": 0.5, "phase": "llp"}]
    for row in rows:
        run.append_metrics(row)
    assert run.read_metrics() == rows
    with open(run.metrics_path, "a") as f:
        f.write('{"epoch": 3, "to\n')
    with pytest.raises(DataError, match=r"Line 3 of .*metrics.jsonl is not JSON"):
        run.read_metrics()


@pytest.mark.parametrize("text, is_run", [
    ('{"data": {"dataset": "mnist5k"}, "run": {"run_dir": "runs/a"}}', True),
    ('{"dataset": "mnist5k", "run_dir": "runs/a"}', True),  # flat, as earlier versions wrote
    ('{"data": {"dataset": "mnist5k"}, "run": {}}', False),
    ('{"learning_rate": 0.1}', False),
    ('["run_dir", "dataset"]', False),
    ("run_dir: runs/a", False),
])
def test_a_run_is_recognised_by_the_settings_in_its_config_json(tmp_path, text, is_run):
    (tmp_path / "config.json").write_text(text)
    assert RunDirectory(tmp_path).holds_settings() == is_run


@pytest.mark.parametrize("overwrite", [True, False])
def test_files_of_a_runs_names_without_its_settings_are_refused_and_kept(tmp_path, overwrite):
    folder = tmp_path / "project"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "model.pt").write_text("weights")
    (folder / "config.json").write_text('{"learning_rate": 0.1}')
    (folder / "notes.txt").write_text("mine")
    before = file_contents(folder)
    refused = "--overwrite does not delete them" if overwrite else "a run does not start there"
    with pytest.raises(ConfigError) as error:
        start_afresh(str(folder), overwrite, chief=True)
    assert str(error.value) == (
        f"{folder} holds config.json, checkpoints but is not a training run (no config.json "
        f"with a run's settings), so {refused}: choose another --run_dir.")
    assert file_contents(folder) == before


def test_checkpoints_are_numbered_by_step_and_kept(tmp_path):
    run = RunDirectory(tmp_path / "run")
    value = tf.Variable(1.0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(value=value),
                                         run.checkpoint_dir, max_to_keep=2)
    assert run.latest_checkpoint() is None and run.checkpoint_paths() == []
    for step in (3, 6, 9):
        value.assign(float(step))
        manager.save(checkpoint_number=step)
    assert [checkpoint_step(p) for p in run.checkpoint_paths()] == [6, 9]
    assert checkpoint_step(run.latest_checkpoint()) == 9
    restored = tf.Variable(0.0)
    tf.train.Checkpoint(value=restored).restore(run.checkpoint_paths()[0])
    assert float(restored.numpy()) == 6.0


def _event_steps(folder):
    """(tag, step) of every summary in the event files under ``folder``, file by file."""
    def creation_order(name):
        # events.out.tfevents.SECONDS.HOST.PID.COUNTER.v2 (HOST may hold dots): the
        # counter of this process's writers orders files of one second.
        parts = name.split(".")
        return int(parts[3]), int(parts[-2])

    found = []
    for name in sorted(os.listdir(folder), key=creation_order):
        for record in tf.data.TFRecordDataset(os.path.join(folder, name)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            found += [(value.tag, event.step) for value in event.summary.value]
    return found


def test_records_past_the_resumed_step_are_dropped(tmp_path):
    run = RunDirectory(tmp_path / "run")
    for step in (5, 10, 15):
        run.append_metrics({"epoch": step // 5, "step": step})
    with open(run.metrics_path, "a") as f:
        f.write('{"epoch": 4, "st')  # torn by a kill
    first = tf.summary.create_file_writer(run.tensorboard_dir)
    with first.as_default():
        for step in range(1, 16):
            tf.summary.scalar("train/loss", float(step), step=step)
    first.close()

    assert run.drop_records_after(10) == 1
    assert run.read_metrics() == [{"epoch": 1, "step": 5}, {"epoch": 2, "step": 10}]
    second = tf.summary.create_file_writer(run.tensorboard_dir)  # the resumed run's file
    with second.as_default():
        for step in range(11, 16):
            tf.summary.scalar("train/loss", float(step), step=step)
    second.close()
    assert _event_steps(run.tensorboard_dir) == [("train/loss", s) for s in range(1, 16)]
    assert run.drop_records_after(15) == 0  # nothing past: nothing changes
    assert len(run.read_metrics()) == 2
