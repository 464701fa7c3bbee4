"""SIGTERM and Ctrl-C in a one-process run: a checkpoint, `TrainingStopped`,
and a rerun that resumes to the uninterrupted state; a second Ctrl-C aborts at
once. (Several workers stopping together: `test_multi_worker.py`, in `make
test-all`.)"""

import io
import os
import signal

import pytest

from llp_tf.training import run_record, run_training
from llp_tf.training.methods import StepRunner
from llp_tf.training.preemption import PreemptionWatch, TrainingStopped
from llp_tf.training.run_directory import RunDirectory
from tests.runs import DriverProcess, assert_same_state, tiny_config, tiny_flags
from tests.cli.tool_main import load_tool, run_main

TRAIN = load_tool("train.py")


@pytest.fixture
def sigint_as_at_a_terminal():
    """SIGINT raises KeyboardInterrupt during the test (a test runner may ignore it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_first_ctrl_c_asks_to_stop_a_second_aborts_and_sigterm_comes_first(
        sigint_as_at_a_terminal):
    # raise_signal runs the Python handler before it returns.
    with PreemptionWatch(None, multi_worker=False) as watch:
        assert watch.stop_requested() is None
        signal.raise_signal(signal.SIGINT)
        assert watch.stop_requested() == signal.SIGINT
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)
        assert watch.stop_requested() == signal.SIGTERM
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert str(TrainingStopped(8, "run/checkpoints/ckpt-8", signal.SIGINT)) == (
        "Stopped by Ctrl-C (SIGINT) at step 8, after writing the checkpoint "
        "run/checkpoints/ckpt-8; rerun the same command to resume.")


def test_an_ignored_sigint_stays_ignored(sigint_as_at_a_terminal):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as for a shell's background job
    with PreemptionWatch(None, multi_worker=False) as watch:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.raise_signal(signal.SIGINT)
        assert watch.stop_requested() is None


def test_sigterm_stops_after_the_loop_with_a_checkpoint_and_the_rerun_resumes(
        tmp_path, stripes, tiny_llp_run, monkeypatch):
    config = tiny_config(tmp_path, stripes)  # the shared run's settings
    real_run = StepRunner.run

    def sigterm_at_step_6(self, iterator, num_steps, phase, on_step=None):
        # The optimizer has taken one step per global step (no warm start here).
        if int(self.method.optimizer.iterations.numpy()) == 6:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_run(self, iterator, num_steps, phase, on_step)

    monkeypatch.setattr(StepRunner, "run", sigterm_at_step_6)
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainingStopped, match="Stopped by SIGTERM at step 8") as stopped:
        run_training(config, io.StringIO())
    # The loop of steps 6-8 ran to its end; no checkpoint is due at step 8.
    run = RunDirectory(config.run_dir)
    assert stopped.value.step == 8 and stopped.value.checkpoint.endswith("ckpt-8")
    assert run.latest_checkpoint() == stopped.value.checkpoint
    assert signal.getsignal(signal.SIGTERM) is handler

    monkeypatch.setattr(StepRunner, "run", real_run)
    log = io.StringIO()
    run_training(config, log)
    assert f"Resumed from {stopped.value.checkpoint} (step 8)." in log.getvalue()
    assert [row["epoch"] for row in run.read_metrics()] == [1, 2, 3]
    assert_same_state(config.run_dir, tiny_llp_run)


@pytest.mark.slow  # 25 s: a training process and the rerun
def test_ctrl_c_stops_train_after_the_loop_with_a_checkpoint_and_the_rerun_resumes(
        tmp_path, stripes, tiny_llp_run):
    flags = tiny_flags(tmp_path, stripes)  # the shared run's settings
    driver = DriverProcess("--tool", "step:6", *flags)
    try:
        driver.wait_until_blocked()
        os.kill(driver.process.pid, signal.SIGINT)
        driver.wait_for(f"SIGNALLED {signal.SIGINT:d}")
        code = driver.resume_and_finish()
    finally:
        driver.kill()
    run = RunDirectory(tmp_path / "run")
    checkpoint = run.latest_checkpoint()
    assert code == 130, driver.text
    # The loop of steps 6-8 ran to its end; no checkpoint is due at step 8.
    assert checkpoint.endswith("ckpt-8")
    assert (f"Stopped by Ctrl-C (SIGINT) at step 8, after writing the checkpoint {checkpoint}; "
            "rerun the same command to resume.\n") in driver.text
    assert "Traceback" not in driver.text and "KeyboardInterrupt" not in driver.text
    assert run_record.started_config(run.path) == tiny_config(tmp_path, stripes)

    code, out, err = run_main(TRAIN, *flags)
    assert code == 0, err
    assert f"Resumed from {checkpoint} (step 8)." in out
    assert [row["epoch"] for row in run.read_metrics()] == [1, 2, 3]
    assert_same_state(run.path, tiny_llp_run)


@pytest.mark.slow  # 20 s: a training process
def test_a_second_ctrl_c_aborts_train_at_once_without_a_checkpoint_or_a_traceback(
        tmp_path, stripes):
    driver = DriverProcess("--tool", "step:6", *tiny_flags(tmp_path, stripes))
    try:
        driver.wait_until_blocked()
        os.kill(driver.process.pid, signal.SIGINT)
        driver.wait_for(f"SIGNALLED {signal.SIGINT:d}")
        os.kill(driver.process.pid, signal.SIGINT)  # the loop of steps 6-8 has not run
        code = driver.wait_for_exit()
    finally:
        driver.kill()
    assert code == 130, driver.text
    assert TRAIN.ABORTED + "\n" in driver.text
    assert "Traceback" not in driver.text and "Stopped by" not in driver.text
    assert RunDirectory(tmp_path / "run").latest_checkpoint().endswith("ckpt-6")
