"""The run directory: its files, the metrics file, the checkpoint manager."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from llp_tf.errors import ConfigError, DataError
from llp_tf.training.run_directory import (RENAMED, RunDirectory, checkpoint_step, current_names,
                                           resolve_checkpoint, start_afresh)
from tests.runs import file_contents
from tests.cli.tool_main import ROOT

#: Rows as the versions before the naming rule wrote them (an LLP run's warm-up
#: and LLP epochs, a Mean Teacher run's), and as they read back.
OLD_ROWS = [
    {"epoch": 1, "step": 5, "phase": "warmup", "learning_rate": 0.1, "train_loss": 6.5,
     "train_aggregation": 6.4, "train_weight_decay": 0.1, "top1": 0.25, "top5": 1.0,
     "categorisation": 1.39, "examples": 40.0, "nn_top1": 0.5,
     "pseudo_label_accuracy": 0.0, "pseudo_label_coverage": 0.0,
     "pseudo_label_confidence": 0.0, "aggregation_score": 0.2},
    {"epoch": 2, "step": 10, "phase": "llp", "learning_rate": 0.00375, "train_loss": 5.5,
     "train_aggregation": 4.0, "train_categorisation": 1.3, "train_weight_decay": 0.1,
     "train_confidence": 1.0, "train_pseudo_labelled": 0.1, "top1": 0.5, "top5": 1.0,
     "categorisation": 1.2, "examples": 40.0, "nn_top1": 0.5,
     "pseudo_label_accuracy": 0.4, "pseudo_label_coverage": 0.5,
     "pseudo_label_confidence": 0.6, "aggregation_score": 0.3},
    {"epoch": 1, "step": 7, "phase": "mean_teacher", "learning_rate": 0.1, "train_loss": 1.0,
     "train_categorisation": 0.9, "train_consistency": 0.01, "train_consistency_weight": 1.0,
     "train_ema_decay": 0.999, "train_weight_decay": 0.1, "top1": 0.5, "top5": 1.0,
     "categorisation": 1.2, "examples": 40.0, "student_top1": 0.25, "student_top5": 1.0,
     "student_categorisation": 1.3},
]
READ_BACK = [
    {"epoch": 1, "step": 5, "phase": "warmup", "learning_rate": 0.1, "loss": 6.5,
     "aggregation": 6.4, "weight_decay": 0.1, "val_top1": 0.25, "val_top5": 1.0,
     "val_categorisation": 1.39, "val_examples": 40.0, "val_nn_top1": 0.5,
     "pseudo_label_accuracy": 0.0, "pseudo_label_coverage": 0.0,
     "pseudo_label_confidence": 0.0, "aggregation_score": 0.2},
    {"epoch": 2, "step": 10, "phase": "llp", "learning_rate": 0.00375, "loss": 5.5,
     "aggregation": 4.0, "categorisation": 1.3, "weight_decay": 0.1,
     "train_confidence": 1.0, "pseudo_labelled": 0.1, "val_top1": 0.5, "val_top5": 1.0,
     "val_categorisation": 1.2, "val_examples": 40.0, "val_nn_top1": 0.5,
     "pseudo_label_accuracy": 0.4, "pseudo_label_coverage": 0.5,
     "pseudo_label_confidence": 0.6, "aggregation_score": 0.3},
    {"epoch": 1, "step": 7, "phase": "mean_teacher", "learning_rate": 0.1, "loss": 1.0,
     "categorisation": 0.9, "consistency": 0.01, "consistency_weight": 1.0,
     "ema_decay": 0.999, "weight_decay": 0.1, "val_top1": 0.5, "val_top5": 1.0,
     "val_categorisation": 1.2, "val_examples": 40.0, "val_student_top1": 0.25,
     "val_student_top5": 1.0, "val_student_categorisation": 1.3},
]
#: A row as this version writes it: an LLP epoch.
TODAYS_ROW = {"epoch": 3, "step": 15, "phase": "llp", "learning_rate": 0.00375, "loss": 5.0,
              "aggregation": 3.9, "categorisation": 1.1, "weight_decay": 0.1,
              "confidence": 0.8, "pseudo_labelled": 1.0, "val_top1": 0.75, "val_top5": 1.0,
              "val_categorisation": 1.0, "val_nn_top1": 0.5, "val_examples": 40,
              "pseudo_label_accuracy": 0.5, "pseudo_label_coverage": 1.0,
              "pseudo_label_confidence": 0.7, "aggregation_score": 0.35}


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
    rows = [{"epoch": 1, "val_top1": 0.25}, {"epoch": 2, "val_top1": 0.5, "phase": "llp"}]
    for row in rows:
        run.append_metrics(row)
    assert run.read_metrics() == rows
    with open(run.metrics_path, "a") as f:
        f.write('{"epoch": 3, "to\n')
    with pytest.raises(DataError, match=r"Line 3 of .*metrics.jsonl is not JSON"):
        run.read_metrics()


def test_an_old_runs_metrics_read_back_under_todays_names(tmp_path):
    run = RunDirectory(tmp_path / "run")
    # A run of an earlier version, resumed by this one: old rows, then a new one.
    for row in OLD_ROWS + [TODAYS_ROW]:
        run.append_metrics(row)
    rows = run.read_metrics()
    assert rows == READ_BACK + [TODAYS_ROW]
    # Today's rows are read as written; the file itself is left as it was.
    assert current_names(TODAYS_ROW) == TODAYS_ROW
    assert current_names({"epoch": 1, "categorisation": 1.0}) == {"epoch": 1,
                                                                  "categorisation": 1.0}
    with open(run.metrics_path) as f:
        assert [json.loads(line) for line in f] == OLD_ROWS + [TODAYS_ROW]
    # The table maps onto names of today's rule, and no two old names onto one.
    assert all(new.startswith("val_") != old.startswith("train_")
               for old, new in RENAMED.items())
    assert len(set(RENAMED.values())) == len(RENAMED)


def test_metrics_read_back_without_tensorflow(tmp_path):
    RunDirectory(tmp_path).append_metrics(OLD_ROWS[1])
    code = ("import sys; from llp_tf.training.run_directory import RunDirectory; "
            f"rows = RunDirectory({str(tmp_path)!r}).read_metrics(); "
            "print(rows[0]['val_top1'], 'tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True, cwd=ROOT)
    assert result.stdout.split() == ["0.5", "False"]


def test_a_torn_last_line_can_be_skipped(tmp_path):
    run = RunDirectory(tmp_path)
    run.append_metrics(TODAYS_ROW)
    with open(run.metrics_path, "a") as f:
        f.write('{"epo')
    assert run.read_metrics(drop_torn_last_line=True) == [TODAYS_ROW]


@pytest.mark.parametrize("text, is_run", [
    ('{"data": {"dataset": "mnist5k"}, "run": {"run_dir": "runs/a"}}', True),
    ('{"dataset": "mnist5k", "run_dir": "runs/a"}', False),
    ('{"data": {"dataset": "mnist5k"}, "run": ["run_dir"]}', False),
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


def _a_started_run(folder, checkpoint):
    """A run directory as a start leaves it: its settings, split and events, a checkpoint if
    ``checkpoint``, and a folder of the user's (export)."""
    (folder / "tensorboard").mkdir(parents=True)
    (folder / "config.json").write_text(
        '{"data": {"dataset": "mnist5k"}, "run": {"run_dir": "%s"}}' % folder)
    (folder / "split.npz").write_bytes(b"split")
    (folder / "export").mkdir()
    if checkpoint:
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "ckpt-3.index").write_bytes(b"index")
        (folder / "checkpoints" / "checkpoint").write_text(
            'model_checkpoint_path: "ckpt-3"\nall_model_checkpoint_paths: "ckpt-3"\n')
        (folder / "metrics.jsonl").write_text('{"epoch": 1}\n')


def test_a_start_that_reached_no_checkpoint_starts_afresh_and_says_what_it_deleted(tmp_path):
    """A failed start (its record, no checkpoint) is deleted, on the chief only, the user's
    files kept; a run with a checkpoint resumes (nothing deleted) unless overwritten, which
    deletes its whole record and names what it left."""
    run_dir = tmp_path / "run"
    _a_started_run(run_dir, checkpoint=False)
    assert start_afresh(str(run_dir), overwrite=False, chief=False) == (True, None)
    assert sorted(os.listdir(run_dir)) == ["config.json", "export", "split.npz", "tensorboard"]
    assert start_afresh(str(run_dir), overwrite=False, chief=True) == (True, (
        f"{run_dir} holds no checkpoint (its start did not reach the first), so the run "
        "starts afresh; deleted its config.json, split.npz, tensorboard."))
    assert sorted(os.listdir(run_dir)) == ["export"]
    assert start_afresh(str(run_dir), overwrite=False, chief=True) == (False, None)

    trained = tmp_path / "trained"
    _a_started_run(trained, checkpoint=True)
    before = file_contents(trained)
    assert start_afresh(str(trained), overwrite=False, chief=True) == (False, None)
    assert file_contents(trained) == before
    assert start_afresh(str(trained), overwrite=True, chief=True) == (True, (
        f"--overwrite: deleted the run's config.json, split.npz, checkpoints, metrics.jsonl, "
        f"tensorboard in {trained}; it starts afresh. Left as they were: export."))
    assert sorted(os.listdir(trained)) == ["export"]


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


def test_a_checkpoint_is_named_by_its_step_or_its_path(tmp_path):
    run = tmp_path / "run"
    folder = run / "checkpoints"
    folder.mkdir(parents=True)
    paths = [str(folder / f"ckpt-{step}") for step in (31, 62)]
    for path in paths:
        open(path + ".index", "w").close()
    with open(folder / "checkpoint", "w") as f:
        f.write(f'model_checkpoint_path: "{paths[1]}"\n' + "".join(
            f'all_model_checkpoint_paths: "{path}"\n' for path in paths))
    assert resolve_checkpoint(str(run), None) is None
    assert resolve_checkpoint(str(run), "31") == paths[0]
    assert resolve_checkpoint(str(run), paths[1]) == paths[1]
    with pytest.raises(ConfigError, match="no checkpoint at step 40; .* steps: 31, 62"):
        resolve_checkpoint(str(run), "40")
    with pytest.raises(ConfigError, match="is not a checkpoint"):
        resolve_checkpoint(str(run), os.path.join(str(folder), "ckpt-9"))
