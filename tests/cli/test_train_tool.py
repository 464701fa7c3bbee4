"""tools/train.py: run in process, but for a corrupt image's run and a resumed demo's, checked
as users run them (a script; make test-all). A script of a checkout answers --help in make
test (test_checkout_tools.py)."""

import errno
import logging as std_logging
import os
import subprocess
import sys
import types

import pytest
from absl import logging

from llp_tf.training import disk_space
from llp_tf.training.config import settings_fields
from tests.runs import file_contents
from tests.cli.tool_main import load_tool, run_main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "tools", "train.py")


def _run_script(*args):
    return subprocess.run([sys.executable, TRAIN, *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def _run(*args):
    """The tool's ``main`` run in this process: (returncode, stdout, stderr) as attributes."""
    code, out, err = run_main(load_tool("train.py"), *args)
    return types.SimpleNamespace(returncode=code, stdout=out, stderr=err)


def test_unknown_regime_lists_the_known_ones():
    result = _run("--regime=r18_p50_q100")
    assert result.returncode == 2
    assert "Unknown regime 'r18_p50_q100'" in result.stderr
    for name in ("demo", "r18_p01_q100", "r18_p10_q30", "r50_p10_q100"):
        assert name in result.stderr


def test_every_regime_flagfile_parses_into_a_valid_config(tmp_path):
    regimes = sorted(f[:-6] for f in os.listdir(os.path.join(ROOT, "flags"))
                     if f.endswith(".flags"))
    assert len(regimes) == 9
    # A bad label percentage after the regime overrides it and is reported as
    # one line: proof that the regime's own settings were accepted first.
    for regime in regimes:
        result = _run(f"--regime={regime}", f"--run_dir={tmp_path}", "--label_percent=0")
        assert result.returncode == 1, (regime, result.stderr)
        assert result.stderr == ("error: Invalid training settings: --label_percent=0.0 "
                                 "(command line) must lie in (0, 100].\n"), regime
        assert "Traceback" not in result.stderr


def test_help_and_helpfull_document_a_flag_for_every_setting():
    for option in ("--help", "--helpfull"):
        result = _run(option)
        assert result.returncode == 0, result.stderr
        assert "Train with Local Label Propagation" in result.stdout
        assert "Traceback" not in result.stderr
        for name in settings_fields():
            assert f"--{name}:" in result.stdout or f"--[no]{name}:" in result.stdout, name
        assert "--regime:" in result.stdout and "--verbosity:" in result.stdout
        assert "--[no]overwrite:" in result.stdout


def test_unexpected_arguments_exit_2_and_unknown_flags_1():
    result = _run("--regime=demo", "stray")
    assert result.returncode == 2
    assert result.stderr == "error: unexpected arguments: stray\n"
    result = _run("--no_such_flag=1")
    assert result.returncode == 1 and result.stderr.startswith("error: Unknown command line flag")


def test_verbosity_sets_absl_logging_and_absl_info_is_hidden_without_it(tmp_path):
    # Both stop at the settings check, after the flags are applied.
    result = _run("--regime=demo", f"--run_dir={tmp_path}", "--label_percent=0", "--verbosity=1")
    assert result.returncode == 1 and logging.get_verbosity() == logging.DEBUG
    result = _run("--regime=demo", f"--run_dir={tmp_path}", "--label_percent=0")
    assert result.returncode == 1 and logging.get_verbosity() == logging.WARNING


def test_fewer_examples_than_one_global_batch_is_one_error_line_and_writes_nothing(
        tmp_path, stripes):
    run_dir = tmp_path / "run"
    result = _run(f"--dataset={stripes}", f"--run_dir={run_dir}", "--image_size=16",
                  "--label_percent=10", "--global_batch_size=256", "--epochs=10")
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines == [
        "error: The run uses 160 training examples, fewer than one global batch "
        "(--global_batch_size=256), so an epoch would have no step. Give "
        "--global_batch_size=160 or less, or use more data (--data_percent, or a larger "
        "dataset)."]
    assert "Traceback" not in result.stderr
    assert not run_dir.exists() or not os.listdir(run_dir)



def test_overwrite_refuses_a_folder_that_is_not_a_run_and_keeps_every_file(tmp_path):
    folder = tmp_path / "project"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "model.pt").write_text("weights")
    (folder / "config.json").write_text('{"learning_rate": 0.1}')
    before = file_contents(folder)
    result = _run("--regime=demo", f"--run_dir={folder}", "--overwrite")
    assert result.returncode == 1
    assert result.stderr == (
        f"error: {folder} holds config.json, checkpoints but is not a training run (no "
        "config.json with a run's settings), so --overwrite does not delete them: choose "
        "another --run_dir.\n")
    assert "Traceback" not in result.stderr
    assert file_contents(folder) == before and sorted(os.listdir(folder)) == [
        "checkpoints", "config.json"]


def test_a_flag_before_the_regime_overrides_it_as_one_after_it_does(tmp_path):
    # demo.flags sets --epochs=64 and --warmup_epochs=10: the settings check
    # reports the command line's epochs wherever it stands, and where each came from.
    for args in (("--epochs=3", "--regime=demo"), ("--regime", "demo", "--epochs=3"),
                 ("--regime=demo", "--epochs=3")):
        result = _run(*args, f"--run_dir={tmp_path}")
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr == (
            "error: Invalid training settings: --warmup_epochs=10 (from --regime=demo) "
            "cannot exceed --epochs=3 (command line): the run would end inside the warm-up "
            "(instance recognition), before LLP; give --epochs=11 or more, or "
            "--warmup_epochs=3 or less (equal: an instance-recognition run only).\n"), args
    tool = load_tool("train.py")
    values = tool.make_flags()
    values(tool.expand_regime(["train", "--epochs=3", "--regime=demo", "--warmup_epochs=1"],
                              sys.stderr))
    config = tool.config_from_flags(values)
    assert (config.optimization.epochs, config.method_settings.warmup_epochs) == (3, 1)
    assert config.optimization.base_learning_rate == 0.03  # the regime's
    assert config.run.run_dir == "runs/demo"
    # A flag before the regime (docs/training.md's example).
    values = tool.make_flags()
    values(tool.expand_regime(["train", "--epochs=20", "--regime=demo"], sys.stderr))
    config = tool.config_from_flags(values)
    assert (config.optimization.epochs, config.method_settings.warmup_epochs) == (20, 10)


def test_a_setting_from_a_flagfile_or_the_default_is_named_so(tmp_path):
    (tmp_path / "mine.flags").write_text("--label_percent=0\n")
    result = _run("--regime=demo", f"--flagfile={tmp_path / 'mine.flags'}", "--data_percent=0")
    assert result.returncode == 1
    assert result.stderr == (
        f"error: Invalid training settings: --label_percent=0.0 (from {tmp_path / 'mine.flags'}) "
        "must lie in (0, 100]; --data_percent=0.0 (command line) must lie in (0, 100].\n")
    result = _run("--run_dir=r", "--epochs=5", "--global_batch_size=0")
    assert result.stderr.startswith(
        "error: Invalid training settings: --warmup_epochs=10 (default) cannot exceed "
        "--epochs=5 (command line): ")
    assert result.stderr.endswith("; --global_batch_size=0 (command line) must be positive.\n")


def test_a_run_dir_that_is_a_file_is_one_error_line(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    run_dir.write_text("not a directory")
    for args in ((f"--run_dir={run_dir}", "--regime=demo"),
                 ("--regime=demo", f"--flagfile={_flagfile(tmp_path, run_dir)}")):
        origin = "command line" if args[0].startswith("--run_dir") else \
            f"from {tmp_path / 'run_dir.flags'}"
        result = _run(*args)
        assert result.returncode == 1
        assert result.stderr == (f"error: --run_dir={run_dir} ({origin}) is a file, not a "
                                 "directory: give a --run_dir that is a directory, or where one "
                                 "can be made.\n")
    assert run_dir.read_text() == "not a directory"
    # The run directory of --regime=demo, runs/demo, comes from its flagfile.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "demo").write_text("")
    assert _run("--regime=demo").stderr == (
        "error: --run_dir=runs/demo (from --regime=demo) is a file, not a directory: give a "
        "--run_dir that is a directory, or where one can be made.\n")


def _flagfile(folder, run_dir):
    path = folder / "run_dir.flags"
    path.write_text(f"--run_dir={run_dir}\n")
    return path


def test_a_run_dir_that_cannot_be_made_is_one_error_line(read_only_folder):
    run_dir = read_only_folder / "run"
    result = _run("--regime=demo", f"--run_dir={run_dir}")
    assert result.returncode == 1
    assert result.stderr == (f"error: --run_dir={run_dir} (command line) cannot be made or "
                             f"written (Permission denied: {run_dir}); give a --run_dir in a "
                             "folder you can write in.\n")
    assert not run_dir.exists()


def test_a_dataset_of_one_class_is_one_error_line_and_writes_nothing(tmp_path):
    from tests.data.helpers import write_image_folder
    write_image_folder(str(tmp_path / "digits" / "train"), {"seven": 8})
    write_image_folder(str(tmp_path / "digits" / "validation"), {"seven": 2}, seed=1)
    run_dir = tmp_path / "run"
    result = _run(f"--dataset=folder:{tmp_path / 'digits'}", f"--run_dir={run_dir}",
                  "--image_size=16", "--label_percent=50", "--global_batch_size=4",
                  "--warmup_epochs=1", "--epochs=1")
    assert result.returncode == 1
    assert result.stderr == (
        f"error: --dataset=folder:{tmp_path / 'digits'} (command line) has 1 class ('seven'): a "
        "classification needs at least two (with one, top-1 is 1.0 whatever the network "
        "learns); give a dataset of two or more classes (folder: one sub-folder per class).\n")
    assert not run_dir.exists()


def test_two_regimes_are_refused(tmp_path):
    result = _run("--regime=demo", "--regime=r18_p10_q100", f"--run_dir={tmp_path}")
    assert result.returncode == 2
    assert result.stderr == ("Give --regime once; the command line has --regime=demo "
                             "--regime=r18_p10_q100.\n")


DEMO_SMALL = ("--regime=demo", "--data_percent=10", "--width=0.25",
              "--global_batch_size=50", "--warmup_epochs=1", "--lr_drop_epochs=1",
              "--steps_per_loop=4")


@pytest.mark.slow  # 20 s: three training processes
def test_a_resume_of_the_demo_prints_no_tensorflow_warning(tmp_path, caplog):
    run_dir = f"--run_dir={tmp_path / 'demo'}"
    first = _run(*DEMO_SMALL, run_dir, "--epochs=1")
    assert first.returncode == 0, first.stderr
    with caplog.at_level(std_logging.WARNING):
        resumed = _run(*DEMO_SMALL, run_dir, "--epochs=2")
    assert resumed.returncode == 0, resumed.stderr
    assert "Resumed from" in resumed.stdout and "trained 2 of 2 epochs" in resumed.stdout
    # (TensorFlow's retracing notice counts the calls of every Evaluator this
    # test process has made; a process that trains once never sees it.)
    assert [record.getMessage() for record in caplog.records
            if "retracing" not in record.getMessage()] == []
    # A rerun of the finished run, as users run it: TensorFlow's warnings would
    # reach the process's stderr.
    rerun = _run_script(*DEMO_SMALL, run_dir, "--epochs=2")
    assert rerun.returncode == 0 and "nothing to do" in rerun.stdout
    assert rerun.stderr == ""


# Slow: a training process. make test keeps the input's error naming the file
# (data/pipeline/test_input_fns.py), an error of the tool as one line (the tests above), and a
# tool's stderr filtered of TensorFlow's lines for its whole run (test_quiet_start.py).
@pytest.mark.slow
@pytest.mark.parametrize("damage", ["garbage", "truncated jpeg"])
def test_a_corrupt_image_is_one_error_line_without_tensorflows_echoes(tmp_path, stripes, damage):
    import shutil

    import tensorflow as tf
    folder = tmp_path / "stripes"
    shutil.copytree(stripes.split(":", 1)[1], folder)
    image = folder / "train" / "checker" / "005.png"
    if damage == "garbage":
        image.write_bytes(b"garbage")
    else:  # cut in its header: libjpeg prints its own words on stderr as it fails
        jpeg = tf.io.encode_jpeg(tf.io.decode_png(image.read_bytes())).numpy()
        image.unlink()
        image = image.with_suffix(".jpg")
        image.write_bytes(jpeg[:len(jpeg) // 4])
    result = _run_script(f"--dataset=folder:{folder}", f"--run_dir={tmp_path / 'run'}",
                         "--image_size=16", "--architecture=resnet10", "--width=0.125",
                         "--small_inputs", "--embedding_dim=16", "--label_percent=10",
                         "--global_batch_size=32", "--warmup_epochs=1", "--epochs=1", "--k=3",
                         "--t=5")
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: Cannot read or decode the image of file {image} ")
    assert result.stderr.count("\n") == 1


def test_a_precision_the_machine_cannot_compute_is_refused_before_the_run_starts(
        tmp_path, monkeypatch):
    from llp_tf.models import precision
    monkeypatch.setattr(precision, "unsupported",
                        lambda name, device="": f"no {name} convolution")
    run_dir = tmp_path / "run"
    result = _run("--regime=demo", f"--run_dir={run_dir}", "--mixed_precision=bfloat16")
    assert result.returncode == 1
    assert result.stderr.startswith("error: --mixed_precision=bfloat16 cannot run on this "
                                    "machine"), result.stderr
    assert "(no bfloat16 convolution)" in result.stderr and "Traceback" not in result.stderr
    assert not run_dir.exists()


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _shown_bytes(text):
    """(bytes, one unit of the last decimal) of a size `disk_space.format_bytes` wrote."""
    value, unit = text.split()
    scale = 1024 ** ("bytes", "KB", "MB", "GB").index(unit)
    return float(value) * scale, (0.1 if unit != "bytes" else 1) * scale


def test_a_start_on_a_full_disk_is_one_line_naming_the_space_a_checkpoint_needs(
        tmp_path, stripes, tiny_llp_training, monkeypatch):
    from tests.runs import tiny_flags
    monkeypatch.setattr(os, "pwrite", _full_disk)  # the lock's record, the start's first write
    result = _run(*tiny_flags(tmp_path, stripes))
    run_dir = tmp_path / "run"
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    start = f"error: No space left on the device of {run_dir} ("
    assert result.stderr.startswith(start), result.stderr
    needed = result.stderr.split("free): the run needs at least ")[1].split(" free there")[0]
    assert result.stderr.endswith(
        f"{needed} free there to start: its settings, split and first checkpoint (the model, "
        "the optimizer and the method's state); free that much there, or give a --run_dir on "
        "a disk with room.\n")
    assert not run_dir.exists()  # nor an empty run.lock in it
    # The estimate against a checkpoint of these settings (the shared run's first): its
    # variables plus `CHECKPOINT_OVERHEAD`, which is above the checkpoint's own overhead.
    checkpoint = os.path.join(tiny_llp_training[0].run_dir, "checkpoints", "ckpt-3")
    actual = disk_space.checkpoint_bytes(checkpoint)
    shown, unit = _shown_bytes(needed)
    assert actual <= shown <= actual * (1 + disk_space.CHECKPOINT_OVERHEAD) + unit


def test_a_resume_on_a_full_disk_is_one_line_naming_its_checkpoints_size(
        tmp_path, stripes, tiny_llp_training, monkeypatch):
    import shutil

    from tests.runs import tiny_flags
    config, _ = tiny_llp_training
    run_dir = shutil.copytree(config.run_dir, tmp_path / "run")
    before = file_contents(run_dir)
    newest = os.path.join(run_dir, "checkpoints", "ckpt-15")
    monkeypatch.setattr(os, "pwrite", _full_disk)
    result = _run(*tiny_flags(tmp_path, stripes, epochs=4))
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: No space left on the device of {run_dir} (")
    needed = result.stderr.split("free): the run needs at least ")[1].split(" free there")[0]
    assert result.stderr.endswith(
        f"{needed} free there to resume, for its next checkpoint, the size of its newest "
        f"({newest}); free that much there, or move the run directory to a disk with room, "
        "and rerun the same command.\n")
    actual = sum(os.path.getsize(os.path.join(run_dir, "checkpoints", name))
                 for name in os.listdir(os.path.join(run_dir, "checkpoints"))
                 if name.startswith("ckpt-15."))
    shown, unit = _shown_bytes(needed)
    assert actual <= shown < actual + unit
    assert file_contents(run_dir) == before  # no run.lock left, nothing else touched
