"""A training process that stops at a chosen point, for the crash, lock and
stop tests (`tests.runs.DriverProcess` is the test's side).

  python -m tests.training.crash_driver CONFIG_JSON POINT
  python -m tests.training.crash_driver --tool POINT TRAIN_FLAGS...

trains the run of ``CONFIG_JSON`` (a `TrainConfig.to_json` file), or runs
tools/train.py with ``TRAIN_FLAGS`` and exits with its exit code, and, at
``POINT``, prints ``BLOCKED`` and waits for a line on stdin: ``continue``
trains on; anything else, or nothing for `WAIT_SECONDS`, ends the process
with exit code 3. The test kills it (SIGKILL) while it waits, signals it, or
lets it go. SIGINT is handled as at a terminal (KeyboardInterrupt, whatever
the parent ignores), and each stop signal the run's `PreemptionWatch`
catches is announced with a line ``SIGNALLED <number>``.

POINT is one of:

- ``step:N``: when a loop of steps is about to start at global step N;
- ``before_save:N``: when the checkpoint of step N is about to be written;
- ``after_save:N``: right after the checkpoint of step N is written;
- ``none``: never.
"""

import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from llp_tf.training import run_training  # noqa: E402
from llp_tf.training.checkpoints import RunCheckpoints  # noqa: E402
from llp_tf.training.config import TrainConfig  # noqa: E402
from llp_tf.training.methods import StepRunner  # noqa: E402
from llp_tf.training.preemption import PreemptionWatch  # noqa: E402

WAIT_SECONDS = 120


def _block(point):
    print(f"BLOCKED {point}", flush=True)
    import select
    ready, _, _ = select.select([sys.stdin], [], [], WAIT_SECONDS)
    if not ready or sys.stdin.readline().strip() != "continue":
        sys.exit(3)


def _install(point):
    kind, _, number = point.partition(":")
    if kind == "none":
        return
    number = int(number)
    if kind == "step":
        run = StepRunner.run

        def blocking_run(self, iterator, num_steps, phase, on_step=None):
            # The optimizer has taken one step per global step (no warm start here).
            if int(self.method.optimizer.iterations.numpy()) == number:
                _block(point)
            return run(self, iterator, num_steps, phase, on_step)

        StepRunner.run = blocking_run
        return
    save = RunCheckpoints.save

    def blocking_save(self, checkpoint_number):
        if kind == "before_save" and checkpoint_number == number:
            _block(point)
        path = save(self, checkpoint_number)
        if kind == "after_save" and checkpoint_number == number:
            _block(point)
        return path

    RunCheckpoints.save = blocking_save


def _announce_signals():
    on_signal = PreemptionWatch._on_signal

    def announcing(self, signum, frame):
        on_signal(self, signum, frame)
        print(f"SIGNALLED {signum}", flush=True)

    PreemptionWatch._on_signal = announcing


def main(config_path, point, *train_flags):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _install(point)
    _announce_signals()
    if config_path == "--tool":
        from tests.cli.tool_main import load_tool
        sys.exit(load_tool("train.py").main(["train.py", *train_flags]))
    with open(config_path) as f:
        config = TrainConfig.from_json(f.read())
    run_training(config, stream=sys.stdout)
    print("FINISHED", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
