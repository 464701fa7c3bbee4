"""The controller's loop on a fake method: loop sizes, checkpoints, evaluations,
learning rates and the order of its actions, resumed or not; each epoch's spent iterator
deleted on another thread."""

import dataclasses
import io
import threading

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.training.actions import NanGuard, TrainingDiverged
from llp_tf.training.controller import Controller, LoopOutput, LoopSettings
from llp_tf.training.epoch_totals import EpochTotals
from llp_tf.training.step_metrics import Mean, StepRecords


class _FakeMethod:
    def __init__(self, warmup_epochs=1):
        self.warmup_epochs = warmup_epochs
        self.prepared = []

    def phase(self, epoch):
        return "warmup" if epoch < self.warmup_epochs else "main"

    def before_epoch(self, epoch, phase):
        self.prepared.append((epoch, phase))

    def metric_kinds(self, phase):
        return {"loss": Mean}


class _FakeRunner:
    """Returns loss = the global step of each step run, and records the calls."""

    def __init__(self, step):
        self.step = step
        self.calls = []

    def run(self, iterator, num_steps, phase, on_step=None):
        first = int(self.step.numpy())
        self.calls.append((first, num_steps, phase))
        for done in range(1, num_steps + 1):
            on_step(done)
        return StepRecords({"loss": np.arange(first + 1, first + num_steps + 1,
                                              dtype=np.float32)})


class _FakeCheckpoints:
    def __init__(self):
        self.saved = []

    def save(self, checkpoint_number):
        self.saved.append(checkpoint_number)


def _controller(tmp_path, start_step=0, epochs=3, steps_per_epoch=5, totals=None, **actions):
    step = tf.Variable(start_step, dtype=tf.int64)
    optimizer = type("Optimizer", (), {"learning_rate": tf.Variable(0.0)})()
    evaluations = []
    controller = Controller(
        method=_FakeMethod(), runner=_FakeRunner(step), step=step,
        totals=totals or EpochTotals([{"loss": Mean}]), checkpoints=_FakeCheckpoints(),
        optimizer=optimizer,
        settings=LoopSettings(epochs=epochs, steps_per_epoch=steps_per_epoch,
                              global_batch_size=8, steps_per_loop=2, checkpoint_every=3,
                              eval_every=2),
        learning_rate=lambda epoch: 0.1 / (epoch + 1),
        make_iterator=lambda epoch, start: (epoch, start),
        evaluate=lambda: evaluations.append(int(step.numpy())) or {"val_top1": 0.5},
        writer=tf.summary.create_noop_writer(), stream=open("/dev/null", "w"), **actions)
    return controller, evaluations


def test_loops_checkpoints_and_evaluations(tmp_path):
    rows = []
    controller, evaluations = _controller(
        tmp_path, eval_actions=[lambda output: rows.append((output.row, output.phase))])
    final = controller.run()
    # Loops of at most 2 steps that stop at checkpoints (every 3 steps) and epoch ends (5).
    assert controller.runner.calls == [
        (0, 2, "warmup"), (2, 1, "warmup"), (3, 2, "warmup"),
        (5, 1, "main"), (6, 2, "main"), (8, 1, "main"), (9, 1, "main"),
        (10, 2, "main"), (12, 2, "main"), (14, 1, "main")]
    # Mid-epoch checkpoints at multiples of 3 (not at an epoch's last step), and every epoch end.
    assert controller.checkpoints.saved == [3, 5, 6, 9, 10, 12, 15]
    # Evaluated every 2 epochs and after the last.
    assert evaluations == [10, 15]
    assert [phase for _, phase in rows] == ["main", "main"]
    assert rows[0][0]["epoch"] == 2 and rows[1][0] is final
    # The epoch's training loss is the step-weighted mean of its loops: steps 6..10.
    assert final["loss"] == pytest.approx(np.mean(np.arange(11, 16)))
    assert final["learning_rate"] == pytest.approx(0.1 / 3)
    assert final["val_top1"] == 0.5 and final["step"] == 15
    assert controller.method.prepared == [(0, "warmup"), (1, "main"), (2, "main")]


def test_resumes_inside_an_epoch_and_stops_at_the_end(tmp_path):
    # Resumed at step 7 with the running sums of steps 6 and 7 (losses 6 and 7),
    # as the checkpoint of step 7 holds them: the epoch reports all its steps.
    totals = EpochTotals([{"loss": Mean}])
    totals.add(StepRecords({"loss": np.array([6.0, 7.0], np.float32)}))
    controller, evaluations = _controller(tmp_path, start_step=7, totals=totals)
    rows = []
    controller.eval_actions.append(lambda output: rows.append(output.row))
    controller.run()
    assert controller.runner.calls[0] == (7, 2, "main")
    assert evaluations == [10, 15]
    assert rows[0]["loss"] == pytest.approx(np.mean(np.arange(6, 11)))
    finished, evaluations = _controller(tmp_path, start_step=15)
    assert finished.run() == {} and finished.runner.calls == [] and evaluations == []


def test_nan_guard_stops_before_the_step_counts(tmp_path):
    def diverge(output):
        if output.global_step >= 5:
            output = LoopOutput(output.global_step, output.steps,
                                StepRecords({"loss": np.full(output.steps, np.nan, np.float32)}))
        NanGuard("run", lambda: "run/checkpoints/ckpt-5")(output)

    controller, _ = _controller(tmp_path, train_actions=[diverge])
    with pytest.raises(TrainingDiverged, match=r"loss became nan at step 6 \(of the 1 step "
                                               r"just run.*ckpt-5\) is kept"):
        controller.run()
    assert int(controller.step.numpy()) == 5


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_bar_moves_inside_a_loop_as_long_as_the_epoch_and_shows_the_runs_eta(
        tmp_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    controller, _ = _controller(tmp_path, epochs=2, steps_per_epoch=4)
    controller.settings = dataclasses.replace(controller.settings, steps_per_loop=4,
                                              checkpoint_every=100)
    controller.stream = _Terminal()
    controller.run()
    assert controller.runner.calls == [(0, 4, "warmup"), (4, 4, "main")]
    draws = controller.stream.getvalue().split("\r")[1:]
    # Steps 1-3 of each loop while it runs, step 4 with the loop's metrics.
    assert [draw.split("] ")[1].split(" ")[0] for draw in draws] == ["1/4", "2/4", "3/4",
                                                                       "4/4"] * 2
    assert "loss" not in draws[0] and "loss 2.5" in draws[3]  # mean of steps 1-4
    assert "run ETA" in draws[2] and "run ETA" in draws[4]
    assert "run ETA" not in draws[7]  # the run's end


def test_each_epochs_iterator_is_deleted_on_another_thread(tmp_path):
    deleted = []

    class _Iterator:
        def __init__(self, epoch):
            self.epoch = epoch

        def __del__(self):
            deleted.append((self.epoch, threading.current_thread().name))

    controller, _ = _controller(tmp_path)
    controller.make_iterator = lambda epoch, start: _Iterator(epoch)
    controller.run()
    for thread in threading.enumerate():
        if thread.name == "release_iterators":
            thread.join(timeout=10)
    assert sorted(deleted) == [(epoch, "release_iterators") for epoch in range(3)]
