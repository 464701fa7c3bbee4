"""The run's record of its settings: config.json as started, the history of changes."""

import json

import pytest

from llp_tf.after_training import run_loader
from llp_tf.errors import ConfigError
from llp_tf.training import run_record
from llp_tf.training.config import TrainConfig


def _config(tmp_path, **changes):
    return TrainConfig.from_settings(run_dir=str(tmp_path), **changes)


def test_resuming_with_changed_state_settings_is_refused(tmp_path):
    config = _config(tmp_path, label_percent=1.0)
    run_record.save_config(config)
    run_record.check_resumable(config.replace(epochs=500))  # harmless change
    with pytest.raises(ConfigError) as raised:
        run_record.check_resumable(config.replace(label_percent=10.0, method="supervised",
                                                  split_file="other.npz"))
    assert str(raised.value) == (
        f"The run directory {tmp_path} holds a run with other settings: --label_percent=10.0 "
        "where its config.json has --label_percent=1.0; --split_file=other.npz where its "
        "config.json has --split_file unset; --method=supervised where its config.json has "
        "--method=llp. Its checkpoints cannot continue with these settings: use a new "
        "--run_dir, or rerun with the saved settings.")
    # The entry point names where the new values came from.
    assert "--method=supervised (command line) where its config.json has --method=llp" in \
        str(raised.value.with_origins({"method": "command line"}))
    # Where the directory is (it was moved) is not a setting of the run.
    run_record.check_resumable(config.replace(run_dir=str(tmp_path / "moved")))
    # Nor is where the training input is built: changed, it is recorded, not refused.
    served = config.replace(input_service="grpc://127.0.0.1:5050")
    run_record.check_resumable(served)
    assert run_record.record_changes(served, step=7) == {
        "input_service": ("", "grpc://127.0.0.1:5050")}


def test_changes_are_recorded_with_their_step_and_config_json_keeps_the_start(tmp_path):
    started = _config(tmp_path, k=10, epochs=8, warmup_epochs=2, lr_drop_epochs=[4])
    run_record.save_config(started)
    assert run_record.record_changes(started, step=0) == {}
    assert run_record.read_history(str(tmp_path)) == []

    changed = started.replace(k=5, epochs=12, lr_drop_epochs=[4, 10])
    assert run_record.record_changes(changed, step=400) == {
        "k": (10, 5), "epochs": (8, 12), "lr_drop_epochs": ([4], [4, 10])}
    # The same settings again (a second resume) change nothing.
    assert run_record.record_changes(changed, step=450) == {}
    assert run_record.record_changes(changed.replace(k=7), step=500) == {"k": (5, 7)}

    history = run_record.read_history(str(tmp_path))
    assert [(entry["step"], entry["changed"]) for entry in history] == [
        (400, {"k": [10, 5], "epochs": [8, 12], "lr_drop_epochs": [[4], [4, 10]]}),
        (500, {"k": [5, 7]})]
    assert run_record.describe_history(str(tmp_path)) == [
        "step 400: epochs: 8 -> 12, lr_drop_epochs: [4] -> [4, 10], k: 10 -> 5",
        "step 500: k: 5 -> 7"]
    with open(tmp_path / "config.json") as f:
        assert json.load(f)["methods"]["llp"]["k"] == 10
    assert run_record.started_config(str(tmp_path)) == started
    current = run_record.current_config(str(tmp_path))
    assert (current.methods["llp"].k, current.optimization.epochs,
            current.optimization.lr_drop_epochs) == (7, 12, (4, 10))
    # Tools that read the run see the settings it trains with now.
    assert run_loader.read_config(str(tmp_path)) == current


def test_a_directory_without_config_has_no_record(tmp_path):
    assert run_record.started_config(str(tmp_path)) is None
    assert run_record.current_config(str(tmp_path)) is None
    run_record.check_resumable(_config(tmp_path))
    with pytest.raises(ConfigError, match="not a training run directory"):
        run_loader.read_config(str(tmp_path))


def test_invalid_settings_read_from_a_run_name_the_file_each_came_from(tmp_path):
    run_record.save_config(_config(tmp_path, epochs=8, warmup_epochs=2))
    started = tmp_path / "config.json"
    history = tmp_path / "config_history.jsonl"
    history.write_text(json.dumps({"step": 40, "time": "t", "changed": {"epochs": [8, 1]}}) +
                       "\n")
    with pytest.raises(ConfigError) as raised:
        run_record.current_config(str(tmp_path))
    assert f"--warmup_epochs=2 (from {started}) cannot exceed --epochs=1 (from {history}, " \
           "step 40): " in str(raised.value)
    settings = json.loads(started.read_text())
    settings["optimization"]["epochs"] = 1
    started.write_text(json.dumps(settings))
    with pytest.raises(ConfigError) as raised:
        run_loader.read_config(str(tmp_path))
    assert f"--warmup_epochs=2 (from {started}) cannot exceed --epochs=1 (from {started}): " \
        in str(raised.value)
