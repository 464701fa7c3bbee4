"""SIGTERM in a one-process run: a checkpoint, `TrainingStopped`, and a rerun
that resumes to the uninterrupted state. (Several workers stopping together:
`test_multi_worker.py`, in `make test-all`.)"""

import io
import os
import signal

import pytest

from llp_tf.training import run_training
from llp_tf.training.methods import StepRunner
from llp_tf.training.preemption import TrainingStopped
from llp_tf.training.run_directory import RunDirectory
from tests.runs import assert_same_state, tiny_config


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
