import glob
import io
import json
import os
import shutil

import numpy as np
import pytest

from llp_tf.models import precision
from llp_tf.training import actions, run_directory, run_record, assembly
from llp_tf.training.methods import StepRunner
from llp_tf.errors import ConfigError, DataError
from tests.cli.tool_main import load_tool, run_main
from tests.runs import assert_same_state, checkpoint_state, file_contents, tiny_flags
from tests.runs import tiny_config as _config

def _metrics(run_dir):
    with open(os.path.join(run_dir, run_directory.METRICS_FILE)) as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def instance_run(tmp_path_factory, stripes):
    """`TrainConfig` of a finished run of 2 instance-recognition epochs (no LLP
    epoch); tests may try to change it, but not train it further."""
    config = _config(tmp_path_factory.mktemp("instance"), stripes, warmup_epochs=2, epochs=2)
    assembly.run_training(config, stream=open(os.devnull, "w"))
    return config


def test_run_writes_its_files_and_final_metrics(tiny_llp_training, tmp_path):
    config, final = tiny_llp_training  # a run of `_config`'s settings
    for name in ("config.json", "split.npz", "metrics.jsonl", "checkpoints", "tensorboard"):
        assert os.path.exists(os.path.join(config.run_dir, name)), name
    rows = _metrics(config.run_dir)
    assert [row["epoch"] for row in rows] == [1, 2, 3]
    assert [row["phase"] for row in rows] == ["warmup", "llp", "llp"]
    assert final == rows[-1] and final["step"] == 3 * 5 and final["val_examples"] == 40
    for name in ("val_top1", "val_top5", "val_nn_top1", "pseudo_label_accuracy",
                 "aggregation_score", "confidence", "pseudo_labelled"):
        assert 0.0 <= final[name] <= 1.0, name
    # Keras's names: training means unprefixed, validation metrics with val_.
    training = {"loss", "aggregation", "categorisation", "weight_decay"}
    validation = {"val_top1", "val_top5", "val_categorisation", "val_nn_top1", "val_examples"}
    bank = {"aggregation_score"}
    pseudo_labels = {"pseudo_label_accuracy", "pseudo_label_coverage",
                     "pseudo_label_confidence"}
    record = {"epoch", "step", "phase", "learning_rate"}
    # In the warm-up nothing is propagated: no confidence, no pseudo-label metrics.
    assert set(rows[0]) == record | training - {"categorisation"} | validation | bank
    for row in rows[1:]:
        assert set(row) == (record | training | {"confidence", "pseudo_labelled"} | validation
                            | bank | pseudo_labels)
    # Rerunning a finished run (a copy: the shared run stays untouched) resumes
    # at its end and trains no further.
    rerun = config.replace(run_dir=str(shutil.copytree(config.run_dir, tmp_path / "run")))
    assert assembly.run_training(rerun, stream=open(os.devnull, "w")) == {}
    assert len(_metrics(rerun.run_dir)) == 3


# Slow: two runs. make test keeps a run stopped mid-epoch (by SIGTERM, at step 8) whose rerun
# reaches the uninterrupted state (test_preemption.py), and the loop's resume inside an epoch
# (test_controller.py).
@pytest.mark.slow
def test_resume_mid_epoch_reaches_the_uninterrupted_state(tmp_path, stripes, tiny_llp_run,
                                                          monkeypatch):
    crashed = _config(tmp_path / "crashed", stripes)
    real_train = StepRunner.run
    calls = []

    def crash_in_the_second_llp_epoch(self, iterator, num_steps, phase, on_step=None):
        calls.append(num_steps)
        if sum(calls) > 12:  # step 12 is a checkpoint in the middle of epoch 3 (steps 10-15)
            raise RuntimeError("simulated crash")
        return real_train(self, iterator, num_steps, phase)

    monkeypatch.setattr(StepRunner, "run", crash_in_the_second_llp_epoch)
    with pytest.raises(RuntimeError, match="simulated crash"):
        assembly.run_training(crashed, stream=open(os.devnull, "w"))
    assert checkpoint_state(crashed.run_dir)["step/.ATTRIBUTES/VARIABLE_VALUE"] == 12
    monkeypatch.setattr(StepRunner, "run", real_train)
    assembly.run_training(crashed, stream=open(os.devnull, "w"))

    # The shared run has the same settings, uninterrupted.
    assert_same_state(crashed.run_dir, tiny_llp_run)


# Slow: a run. make test keeps the loop's NaN guard, which stops before the step counts and
# names the last checkpoint (test_controller.py).
@pytest.mark.slow
def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, stripes,
                                                                   monkeypatch):
    config = _config(tmp_path, stripes)
    real_train = StepRunner.run
    calls = []

    def diverge(self, iterator, num_steps, phase, on_step=None):
        metrics = real_train(self, iterator, num_steps, phase, on_step)
        calls.append(num_steps)
        if sum(calls) > 7:
            metrics.values["loss"][-1] = np.nan
        return metrics

    monkeypatch.setattr(StepRunner, "run", diverge)
    with pytest.raises(actions.TrainingDiverged, match=r"loss became nan at step 8.*"
                       r"last good checkpoint.*ckpt-6"):
        assembly.run_training(config, stream=open(os.devnull, "w"))
    state = checkpoint_state(config.run_dir)
    assert state["step/.ATTRIBUTES/VARIABLE_VALUE"] == 6
    # Everything trained is finite (the plateau tracker's best starts at -inf).
    assert all(np.all(np.isfinite(v)) for name, v in state.items()
               if v.dtype.kind == "f" and not name.startswith("plateau"))


@pytest.mark.slow
def test_loss_falls_and_pseudo_label_accuracy_rises_on_a_separable_set(tmp_path, stripes):
    # LLP needs an embedding that already groups the classes somewhat: ten
    # warm-start epochs here (the paper's ten are 100k steps). The accuracy is
    # over the 144 unlabelled examples, so one epoch's figure has a standard
    # error of about sqrt(0.25 / 144) = 0.042: twenty LLP epochs raise it by
    # about 0.2 (0.18-0.21 with the default build, oneDNN at AVX2 and without
    # oneDNN), so a rise of 0.1 is more than two standard errors either way;
    # ten epochs raised it by only 0.09-0.12.
    config = _config(tmp_path, stripes, warmup_epochs=10, epochs=30, steps_per_loop=5,
                     checkpoint_every=100)
    assembly.run_training(config, stream=open(os.devnull, "w"))
    llp = [row for row in _metrics(config.run_dir) if row["phase"] == "llp"]
    first, last = llp[0], llp[-3:]
    assert np.mean([row["loss"] for row in last]) < first["loss"] - 1.0
    accuracy = np.mean([row["pseudo_label_accuracy"] for row in last])
    assert accuracy > first["pseudo_label_accuracy"] + 0.1
    assert accuracy > 0.4  # chance is 0.25


# Slow: a run. make test keeps a supervised method's whole run (test_label_safety.py's careless
# one) and a method without a bank evaluated without kNN (methods/test_two_stream_runs.py).
@pytest.mark.slow
def test_supervised_baseline(tmp_path, stripes):
    supervised = _config(tmp_path / "sup", stripes, method="supervised", epochs=2)
    final = assembly.run_training(supervised, stream=open(os.devnull, "w"))
    assert final["phase"] == "supervised" and "val_nn_top1" not in final


# Slow: two runs. make test keeps the warm start's load (methods/test_llp.py's
# test_a_warm_start_loads_a_runs_model_and_bank_rows) and the bank's partial restore
# (tests/core/test_bank_contract.py).
@pytest.mark.slow
def test_warm_start(tmp_path, stripes, instance_run):
    llp = _config(tmp_path / "llp", stripes, warmup_epochs=2, epochs=3,
                  warm_start=instance_run.run_dir)
    final = assembly.run_training(llp, stream=open(os.devnull, "w"))
    rows = _metrics(llp.run_dir)
    assert [row["phase"] for row in rows] == ["llp"] and final["step"] == 15
    # The LLP run starts from the instance-recognition run's weights and bank.
    ir_state = checkpoint_state(instance_run.run_dir)
    bank_key = next(name for name in ir_state if "bank/embeddings" in name)
    assert bank_key in checkpoint_state(llp.run_dir)


def _copied(tiny_llp_training, tmp_path):
    """A copy of the shared run in ``tmp_path/run``, `tiny_flags`'s run directory."""
    config, _ = tiny_llp_training
    return config.replace(run_dir=str(shutil.copytree(config.run_dir, tmp_path / "run")))


def test_changed_settings_in_an_existing_run_dir_are_refused(tiny_llp_training, tmp_path):
    trained = _copied(tiny_llp_training, tmp_path)
    with pytest.raises(ConfigError, match="embedding_dim"):
        assembly.run_training(trained.replace(embedding_dim=8),
                                   stream=open(os.devnull, "w"))


def test_a_resume_with_another_global_batch_is_refused_and_changes_nothing(tiny_llp_training,
                                                                          stripes, tmp_path):
    # 3 epochs at a batch of 32; at 16 its step 15 would be in epoch 1 and the learning-rate
    # drops and warm-up (in epochs) would move, so the resume is refused, before any write.
    trained = _copied(tiny_llp_training, tmp_path)
    before = file_contents(trained.run_dir)
    for epochs in (3, 4):
        with pytest.raises(ConfigError) as raised:
            assembly.run_training(trained.replace(global_batch_size=16, epochs=epochs),
                                  stream=open(os.devnull, "w"))
        assert str(raised.value) == (
            f"The run directory {trained.run_dir} holds a run with other settings: "
            "--global_batch_size=16 where its config.json has --global_batch_size=32. Its "
            "checkpoints cannot continue with these settings: use a new --run_dir, or rerun "
            "with the saved settings.")
    assert file_contents(trained.run_dir) == before
    assert [row["epoch"] for row in _metrics(trained.run_dir)] == [1, 2, 3]
    # As the tool says it: one line, the new value's origin named.
    code, out, err = run_main(load_tool("train.py"), *tiny_flags(
        tmp_path, stripes, global_batch_size=16))
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: The run directory ") and "--global_batch_size=16 (command " \
        "line) where its config.json has --global_batch_size=32." in err, err
    assert file_contents(trained.run_dir) == before


# Slow: two runs. make test keeps the rule on its own (test_run_directory.py's
# test_a_start_that_reached_no_checkpoint_starts_afresh_...), a corrupt image named by the
# input (data/pipeline/test_input_fns.py) and --overwrite's run below.
@pytest.mark.slow
def test_a_start_that_wrote_no_checkpoint_is_retried_afresh_with_other_settings(
        tmp_path, stripes):
    folder = tmp_path / "stripes"
    shutil.copytree(stripes.split(":", 1)[1], folder)
    image = folder / "train" / "checker" / "005.png"
    good = image.read_bytes()
    image.write_bytes(b"not an image")
    config = _config(tmp_path, f"folder:{folder}", warmup_epochs=1, epochs=1)
    with pytest.raises(DataError, match="005.png"):
        assembly.run_training(config, stream=open(os.devnull, "w"))
    run = run_directory.RunDirectory(config.run_dir)
    assert run.training_record() == ["config.json", "split.npz", "tensorboard"]
    image.write_bytes(good)
    log = io.StringIO()
    final = assembly.run_training(config.replace(embedding_dim=8), stream=log)
    assert log.getvalue().splitlines()[0] == (
        f"{config.run_dir} holds no checkpoint (its start did not reach the first), so the "
        "run starts afresh; deleted its config.json, split.npz, tensorboard.")
    assert final["step"] == 5
    assert log.getvalue().splitlines()[-1] == (
        f"Trained steps 0-5 (epoch 1); the run in {config.run_dir} has trained 1 of 1 epoch.")
    assert run_record.started_config(config.run_dir).model.embedding_dim == 8


# Slow: a run. make test keeps --overwrite's rule, its deletions and its notice
# (test_run_directory.py's test_a_start_that_reached_no_checkpoint_starts_afresh_...).
@pytest.mark.slow
def test_overwrite_starts_a_trained_run_afresh_and_names_what_it_left(tmp_path, instance_run):
    run_dir = shutil.copytree(instance_run.run_dir, tmp_path / "run")
    (run_dir / "export").mkdir()
    config = instance_run.replace(run_dir=str(run_dir), embedding_dim=8, warmup_epochs=1,
                                  epochs=1)
    log = io.StringIO()
    final = assembly.run_training(config, stream=log, overwrite=True)
    assert log.getvalue().splitlines()[0] == (
        f"--overwrite: deleted the run's config.json, split.npz, checkpoints, metrics.jsonl, "
        f"tensorboard in {run_dir}; it starts afresh. Left as they were: export.")
    assert final["step"] == 5 and [row["epoch"] for row in _metrics(run_dir)] == [1]
    assert run_record.started_config(str(run_dir)).model.embedding_dim == 8
    assert (run_dir / "export").is_dir()


# Slow: the same path runs in make test with a sharded bank
# (methods/test_llp_shard_bank.py) and as two workers' reference (test_multi_worker.py).
@pytest.mark.slow
def test_two_cpu_replicas_train(tmp_path, stripes, two_replica_strategy):
    config = _config(tmp_path, stripes, cpu_replicas=2, sync_batch_norm=True, epochs=2)
    final = assembly.run_training(config, stream=open(os.devnull, "w"))
    assert final["step"] == 10 and np.isfinite(final["loss"])


# Slow: a run. make test keeps its parts: what a rerun says and records (test_resumption.py),
# a damaged newest checkpoint passed over for the previous one (test_checkpoints.py).
@pytest.mark.slow
def test_reruns_say_what_they_did_record_changes_and_survive_a_damaged_checkpoint(
        tmp_path, tiny_llp_training):
    # A copy of the shared run: 3 epochs of 5 steps, checkpoints at 3, 5, 6, 9, 10, 12, 15.
    config, _ = tiny_llp_training
    config = config.replace(run_dir=str(shutil.copytree(config.run_dir, tmp_path / "run")))
    run = run_directory.RunDirectory(config.run_dir)
    started = open(run.config_path).read()

    log = io.StringIO()
    assert assembly.run_training(config.replace(epochs=2, k=5), stream=log) == {}
    assert ("has trained 3 epochs (step 15), more than the 2 asked (--epochs=2); nothing "
            "was trained or changed") in log.getvalue()
    log = io.StringIO()
    assert assembly.run_training(config, stream=log) == {}
    assert "has trained the 3 epochs asked (step 15); nothing to do" in log.getvalue()
    assert open(run.config_path).read() == started
    assert not os.path.exists(run.file(run_record.HISTORY_FILE))

    newest = run.latest_checkpoint()
    for data in glob.glob(newest + ".data-*"):  # the saver's shards, the bank's blocks too
        with open(data, "r+b") as f:
            f.truncate(100)
    log = io.StringIO()
    final = assembly.run_training(config.replace(epochs=4, k=5), stream=log)
    text = log.getvalue()
    assert f"the checkpoint {newest} cannot be read" in text
    assert "Resumed from" in text and "ckpt-12 (step 12)" in text
    assert "Dropped 1 metrics row recorded after step 12" in text
    assert "Settings changed since the run last trained: epochs: 3 -> 4, k: 3 -> 5; " \
           "recorded at step 12" in text
    assert "Trained steps 12-20 (epochs 3-4); the run in" in text
    assert "has trained 4 of 4 epochs" in text
    assert [row["epoch"] for row in _metrics(config.run_dir)] == [1, 2, 3, 4]
    assert final["step"] == 20
    assert open(run.config_path).read() == started
    assert run_record.describe_history(config.run_dir) == ["step 12: epochs: 3 -> 4, k: 3 -> 5"]


@pytest.mark.slow  # 20-35 s: three runs, one XLA-compiled
def test_a_run_changes_precision_and_xla_on_resume(tmp_path, stripes):
    """float32 for 2 epochs, then bfloat16 with XLA, then float16 with loss
    scaling: the checkpoint (float32 weights, the SGD's slots) restores into each.
    Where the machine cannot compute in one low precision (`precision.unsupported`),
    the other takes both of its turns; where it computes in neither, the test skips."""
    lows = [name for name in ("bfloat16", "float16") if not precision.unsupported(name)]
    if not lows:
        pytest.skip("neither bfloat16 nor float16 can run here")
    config = _config(tmp_path, stripes, epochs=2, image_size=32)
    assembly.run_training(config, stream=open(os.devnull, "w"))
    first = checkpoint_state(config.run_dir)
    assert {str(first[name].dtype) for name in first if name.startswith("model/")} == {"float32"}
    log = io.StringIO()
    changed = config.replace(epochs=3, mixed_precision=lows[0], jit_compile=True)
    final = assembly.run_training(changed, stream=log)
    assert ("Settings changed since the run last trained: epochs: 2 -> 3, mixed_precision: "
            f"'float32' -> '{lows[0]}', jit_compile: False -> True; recorded at step 10"
            ) in log.getvalue()
    assert final["step"] == 15 and np.isfinite(final["loss"])
    state = checkpoint_state(config.run_dir)
    assert set(state) == set(first)
    assert all(state[name].dtype == first[name].dtype for name in first)
    final = assembly.run_training(changed.replace(epochs=4, mixed_precision=lows[-1],
                                                      jit_compile=False),
                                      stream=open(os.devnull, "w"))
    assert final["step"] == 20 and 0.0 <= final["val_top1"] <= 1.0
    assert set(checkpoint_state(config.run_dir)) == set(first)
    assert [row["epoch"] for row in _metrics(config.run_dir)] == [1, 2, 3, 4]
    assert all(np.isfinite(row["loss"]) for row in _metrics(config.run_dir))


# Slow: three runs. make test keeps their parts: the exclude list read and checked on a resume
# (data/splits/test_exclusions.py), excluded examples never drawn nor evaluated
# (data/splits/test_exclusions.py, data/pipeline/test_input_fns.py).
@pytest.mark.slow
def test_excluded_examples_are_never_drawn_and_a_resume_keeps_them_out(tmp_path):
    from llp_tf.data.sources.registry import load_source
    from llp_tf.data.splits import exclusions, regime
    from llp_tf.errors import DataError
    from tests.runs import write_stripes

    dataset = write_stripes(tmp_path / "data", train_per_class=10, validation_per_class=3)
    # Classes in sorted order (checker, diagonal, horizontal, vertical), then files.
    bad_train = tmp_path / "data" / "train" / "vertical" / "002.png"  # train example 32
    bad_validation = tmp_path / "data" / "validation" / "checker" / "001.png"  # example 1
    bad_train.write_bytes(b"")
    bad_validation.write_bytes(b"GIF89a, cut short")
    config = _config(tmp_path, dataset, global_batch_size=8, warmup_epochs=0, epochs=1,
                     label_percent=20.0)
    # A bad validation image stops a new run before it writes anything.
    with pytest.raises(DataError, match=rf"^1 validation image of {dataset} cannot be "
                                        rf"read or decoded \(first: file {bad_validation} "
                                        r"\(validation example 1\)\)\."):
        assembly.run_training(config, stream=io.StringIO())
    assert not any(os.path.exists(os.path.join(config.run_dir, name))
                   for name in ("split.npz", "config.json"))

    listed = tmp_path / "bad.txt"
    listed.write_text(exclusions.format_exclude_list(
        [("train", 32, f"file {bad_train}"), ("validation", 1, f"file {bad_validation}")],
        dataset))
    config = config.replace(exclude_list=str(listed))
    final = assembly.run_training(config, stream=io.StringIO())
    assert final["val_examples"] == 11 and final["step"] == 4  # 39 used examples, batches of 8
    split_path = os.path.join(config.run_dir, "split.npz")
    labelled, used = regime.load_splits(split_path, np.repeat(np.arange(4), 10))
    np.testing.assert_array_equal(used, np.setdiff1d(np.arange(40), [32]))
    assert labelled.size == 8 and 32 not in labelled
    record = exclusions.read_exclude_list(str(listed), load_source(dataset))
    assert regime.read_made_from(split_path)["exclude_list"] == record.record()
    with open(os.path.join(config.run_dir, "config.json")) as f:
        assert json.load(f)["data_files"] == {"label_subset": None,
                                              "exclude_list": record.record()}

    # The same examples, listed in another file: the run resumes.
    copy = shutil.copy(listed, tmp_path / "copy.txt")
    final = assembly.run_training(config.replace(epochs=2, exclude_list=str(copy)),
                                      stream=io.StringIO())
    assert final["step"] == 8 and final["val_examples"] == 11
    # Other exclusions (here none) are refused before anything is trained.
    with pytest.raises(DataError, match=r"was started excluding 1 training and 1 validation "
                                        r"examples .*; --exclude_list now excludes none\."):
        assembly.run_training(config.replace(epochs=3, exclude_list=None),
                                  stream=io.StringIO())
    assert [row["epoch"] for row in _metrics(config.run_dir)] == [1, 2]
