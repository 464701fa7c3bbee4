"""Two worker processes (MultiWorkerMirroredStrategy over loopback, one CPU each),
started by tools/launch_local.py, against one process with two CPU replicas: LLP,
and FixMatch for the methods that read two streams and two views."""

import io
import os
import signal
import subprocess
import sys
import time

import pytest

from llp_tf.training import local_launcher, run_training
from llp_tf.training.run_directory import RunDirectory
from tests import numerics
from tests.runs import assert_same_state, checkpoint_state, tiny_config
from tests.cli.tool_main import ROOT, load_tool, tool_path

LAUNCH_TIMEOUT_SECONDS = 240
SETTINGS = dict(warmup_epochs=1, epochs=2, eval_every=1)
RUN_FILES = {"config.json", "split.npz", "checkpoints", "metrics.jsonl", "tensorboard"}


def _flags(config):
    """Command-line flags of tools/train.py that give ``config``."""
    args = []
    for name, value in config.settings().items():
        if value is None:
            continue
        if isinstance(value, bool):
            args.append(f"--{'' if value else 'no'}{name}")
        elif isinstance(value, tuple):
            args.append(f"--{name}={','.join(str(v) for v in value)}")
        else:
            args.append(f"--{name}={value}")
    return args


def _launch(config, **popen):
    command = [sys.executable, tool_path("launch_local.py"), "--workers=2",
               f"--timeout_seconds={LAUNCH_TIMEOUT_SECONDS}", "--", tool_path("train.py"),
               *_flags(config)]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **popen)


@pytest.fixture(scope="module")
def one_process_two_replicas(tmp_path_factory, stripes):
    config = tiny_config(tmp_path_factory.mktemp("one"), stripes, cpu_replicas=2, **SETTINGS)
    run_training(config, stream=io.StringIO())
    return config.run_dir


def _wait_until(condition):
    """Returns once ``condition()`` holds (or the launch timeout passed)."""
    deadline = time.monotonic() + LAUNCH_TIMEOUT_SECONDS
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.2)


def _assert_the_relaunch_resumes(config, step, reference_dir):
    """Relaunches both workers: they resume from the checkpoint at ``step`` and end
    as the one process with two replicas did."""
    run = RunDirectory(config.run_dir)
    relaunch = _launch(config)
    out, _ = relaunch.communicate(timeout=LAUNCH_TIMEOUT_SECONDS + 30)
    assert relaunch.returncode == 0, out
    assert f"Resumed from {run.checkpoint_dir}/ckpt-{step}" in out
    _assert_close_states(config.run_dir, reference_dir)
    assert [row["epoch"] for row in run.read_metrics()] == [1, 2]


def _steps(run_dir):
    return int(checkpoint_state(run_dir)["step/.ATTRIBUTES/VARIABLE_VALUE"])


def _assert_close_states(run_dir, reference_dir, bank=True):
    """Same variables; integers equal, floats equal up to the rounding of the
    run's steps (`tests.numerics`): the workers' all-reduce sums in another
    order than one process's (bit-equal on some CPUs, not on others)."""
    assert_same_state(run_dir, reference_dir, bank=bank, steps=_steps(reference_dir))


def test_two_workers_train_as_one_process_with_two_replicas(
        tmp_path, stripes, one_process_two_replicas):
    config = tiny_config(tmp_path, stripes, cluster="auto", **SETTINGS)
    launcher = _launch(config)
    out, _ = launcher.communicate(timeout=LAUNCH_TIMEOUT_SECONDS + 30)
    assert launcher.returncode == 0, out
    assert "[worker 1] This is worker 1 of 2: it trains, the chief writes" in out
    _assert_close_states(config.run_dir, one_process_two_replicas)
    rows = RunDirectory(config.run_dir).read_metrics()
    assert [row["epoch"] for row in rows] == [1, 2]
    reference = RunDirectory(one_process_two_replicas).read_metrics()
    assert rows[-1]["val_top1"] == pytest.approx(reference[-1]["val_top1"], abs=0.03)
    # The chief alone wrote the run directory; the other worker left nothing.
    assert set(os.listdir(config.run_dir)) == RUN_FILES


@pytest.mark.slow
def test_fixmatch_on_two_workers_trains_as_one_process_with_two_replicas(tmp_path, stripes):
    """Two streams (labelled, unlabelled) and two views (weak, strong) per worker.

    One step an epoch (a global batch of all 160 stripes), two steps in all:
    the numerics' bound grows by one step's rounding a step, while this
    tiny network at lr 0.1 amplifies a difference several times a step, so
    ten steps (32 a step) left it within the bound on one oneDNN path and
    past it on another (2.7% of the weights apart without oneDNN)."""
    settings = dict(SETTINGS, method="fixmatch", warmup_epochs=0, global_batch_size=160)
    reference = tiny_config(tmp_path / "one", stripes, cpu_replicas=2, **settings)
    run_training(reference, stream=io.StringIO())
    config = tiny_config(tmp_path / "two", stripes, cluster="auto", **settings)
    launcher = _launch(config)
    out, _ = launcher.communicate(timeout=LAUNCH_TIMEOUT_SECONDS + 30)
    assert launcher.returncode == 0, out
    _assert_close_states(config.run_dir, reference.run_dir, bank=False)
    rows = RunDirectory(config.run_dir).read_metrics()
    wanted = RunDirectory(reference.run_dir).read_metrics()
    assert [row["epoch"] for row in rows] == [1, 2]
    for name in ("labelled", "unlabelled", "mask"):
        numerics.assert_close_values(wanted[-1][name], rows[-1][name],
                                     _steps(reference.run_dir), what=name)


@pytest.mark.slow
def test_sigterm_to_one_worker_stops_both_with_a_checkpoint_and_the_relaunch_resumes(
        tmp_path, stripes, one_process_two_replicas):
    config = tiny_config(tmp_path, stripes, cluster="auto", steps_per_loop=1,
                         checkpoint_every=100, **SETTINGS)
    run = RunDirectory(config.run_dir)
    launcher = _launch(config, start_new_session=True)
    try:
        # The first epoch is evaluated: the second one runs.
        _wait_until(lambda: os.path.exists(run.metrics_path))
        children = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True,
                                  text=True).stdout.split()
        assert len(children) == 2
        os.kill(int(children[1]), signal.SIGTERM)  # one worker only
        out, _ = launcher.communicate(timeout=LAUNCH_TIMEOUT_SECONDS)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    assert launcher.returncode == 143, out
    assert "[worker 0] Stopped by SIGTERM at step" in out
    assert "[worker 1] Stopped by SIGTERM at step" in out
    stopped = int(out.split("[worker 0] Stopped by SIGTERM at step ")[1].split(",")[0])
    assert 5 <= stopped < 10
    _assert_the_relaunch_resumes(config, stopped, one_process_two_replicas)


def _worker(config, ports, index):
    """tools/train.py as worker ``index`` of a cluster on ``ports`` (as on two hosts,
    without the launcher that stops the others when one dies)."""
    env = dict(os.environ, TF_CONFIG=local_launcher.tf_config(ports, index))
    return subprocess.Popen([sys.executable, tool_path("train.py"), *_flags(config)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_killed_worker_is_one_line_on_the_survivor_and_the_relaunch_resumes(
        tmp_path, stripes, one_process_two_replicas):
    config = tiny_config(tmp_path, stripes, cluster="auto", steps_per_loop=1,
                         checkpoint_every=100, **SETTINGS)
    run = RunDirectory(config.run_dir)
    ports = load_tool("command_line.py").free_ports(2)
    workers = [_worker(config, ports, index) for index in (0, 1)]
    try:
        _wait_until(run.latest_checkpoint)  # the first epoch's, at step 5
        workers[1].kill()
        out, err = workers[0].communicate(timeout=LAUNCH_TIMEOUT_SECONDS)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.communicate()
    assert workers[0].returncode == 1, out + err
    assert err == (
        "error: Lost worker 1 of the cluster (killed, out of memory or its node lost), so "
        "worker 0 stopped too. Relaunch every worker with the same command: the run resumes "
        f"from its checkpoint at step 5 ({run.checkpoint_dir}/ckpt-5).\n")
    _assert_the_relaunch_resumes(config, 5, one_process_two_replicas)
