"""What a rerun of a run says and records before it trains (`resumption.settle_records`), on a
copy of the shared 3-epoch LLP run (5 steps an epoch, checkpoints at 3, 5, 6, 9, 10, 12, 15).
A rerun that trains (test_assembly.py's test_reruns_say_what_they_did_..., make test-all)
reads these lines from a whole run."""

import shutil

from llp_tf.training import resumption, run_record
from llp_tf.training.run_directory import RunDirectory


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
