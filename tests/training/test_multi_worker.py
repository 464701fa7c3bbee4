"""Two worker processes (MultiWorkerMirroredStrategy over loopback, one CPU each),
started by tools/launch_local.py, against one process with two CPU replicas: the step
after a checkpoint that process wrote, taken by both and compared per term to
`tests.numerics`' bounds (LLP, and FixMatch for the methods that read two streams
and two views); workers stopped and relaunched end as uninterrupted workers, bit for bit."""

import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from llp_tf.training import local_launcher
from llp_tf.training.run_directory import RunDirectory
from tests.runs import assert_same_state, tiny_config
from tests.cli.tool_main import ROOT, load_tool, tool_path
from tests.training.run_steps import ONE_STEP_EPOCHS, assert_same_fixmatch_step, \
    assert_same_llp_step, recorded_logit_scale, reference_after_a_copy

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


def _workers_after_a_copy(tmp_path, stripes, worker_settings=(), **settings):
    """One process with two replicas (or ``cpu_replicas`` of ``settings``) trains the first
    epoch of ``settings`` (one step), two workers the second from a copy of its checkpoint,
    as it does (`tests.training.run_steps`), with ``worker_settings`` too. Returns (its
    config, the workers' run directory)."""
    other = tmp_path / "two" / "run"
    settings = dict(dict(cpu_replicas=2), **settings)
    reference = reference_after_a_copy(tmp_path / "one", stripes, other, **settings)
    settings = dict(settings, **dict(dict(cpu_replicas=0), **dict(worker_settings)))
    config = tiny_config(tmp_path / "two", stripes, cluster="auto",
                         **dict(ONE_STEP_EPOCHS, **settings))
    launcher = _launch(config)
    out, _ = launcher.communicate(timeout=LAUNCH_TIMEOUT_SECONDS + 30)
    assert launcher.returncode == 0, out
    assert f"Resumed from {RunDirectory(config.run_dir).checkpoint_dir}/ckpt-1" in out
    assert "[worker 1] This is worker 1 of 2: it trains, the chief writes" in out
    # The chief alone wrote the run directory (and recorded the changed
    # settings); the other worker left nothing.
    assert set(os.listdir(config.run_dir)) == RUN_FILES | {"config_history.jsonl"}
    assert not glob.glob(os.path.join(config.run_dir, "checkpoints", "*.parts"))
    return reference, config.run_dir


@pytest.mark.slow  # 30 s: a two-stage run here and two worker processes
def test_two_workers_take_the_step_of_one_process_with_two_replicas(tmp_path, stripes,
                                                                    monkeypatch):
    """The first LLP step, after the warm-up's, per term (`run_steps.assert_same_llp_step`)."""
    logits = recorded_logit_scale(monkeypatch, "categorisation_loss", [0])
    assert_same_llp_step(*_workers_after_a_copy(tmp_path, stripes, warmup_epochs=1), logits)


@pytest.mark.slow  # 60 s: four replicas here, then two workers of two
def test_two_workers_of_two_replicas_sharding_the_bank_take_the_replicated_step(
        tmp_path, stripes, monkeypatch):
    """The bank sharded over 2 x 2 replicas, restored from the replicated bank's checkpoint
    of a process with four replicas: the first LLP step (the density refresh, the
    aggregation loss, propagation and the bank's writes, each across workers) per term
    against that process's, read from the checkpoint the workers merged."""
    logits = recorded_logit_scale(monkeypatch, "categorisation_loss", [0])
    assert_same_llp_step(*_workers_after_a_copy(
        tmp_path, stripes, warmup_epochs=1, cpu_replicas=4,
        worker_settings=dict(cpu_replicas=2, shard_bank=True)), logits)


@pytest.mark.slow
def test_fixmatch_on_two_workers_takes_the_step_of_one_process_with_two_replicas(
        tmp_path, stripes, monkeypatch):
    """Two streams (labelled, unlabelled) and two views (weak, strong) per worker: the
    second step, per term (`run_steps.assert_same_fixmatch_step`), at a threshold that
    some weak views pass."""
    logits = recorded_logit_scale(monkeypatch, "pseudo_label_terms", [0, 2, 3])
    reference, other = _workers_after_a_copy(tmp_path, stripes, method="fixmatch",
                                             warmup_epochs=0, fixmatch_threshold=0.3)
    assert_same_fixmatch_step(reference, other, logits)
    assert RunDirectory(other).read_metrics()[1]["mask"] > 0


#: The run the stopped workers' tests relaunch: one loop a step, no checkpoint but the epochs'.
STOPPED_SETTINGS = dict(SETTINGS, cluster="auto", steps_per_loop=1, checkpoint_every=100)


@pytest.fixture(scope="module")
def two_workers_uninterrupted(tmp_path_factory, stripes):
    """The run directory of `STOPPED_SETTINGS` trained by two workers, uninterrupted."""
    config = tiny_config(tmp_path_factory.mktemp("uninterrupted"), stripes, **STOPPED_SETTINGS)
    launcher = _launch(config)
    out, _ = launcher.communicate(timeout=LAUNCH_TIMEOUT_SECONDS + 30)
    assert launcher.returncode == 0, out
    return config.run_dir


def _wait_until(condition):
    """Returns once ``condition()`` holds (or the launch timeout passed)."""
    deadline = time.monotonic() + LAUNCH_TIMEOUT_SECONDS
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.2)


def _assert_the_relaunch_resumes(config, step, reference_dir):
    """Relaunches both workers: they resume from the checkpoint at ``step`` and end
    as uninterrupted workers did, bit for bit (the same processes, the same
    operations in the same order), metrics too."""
    run = RunDirectory(config.run_dir)
    relaunch = _launch(config)
    out, _ = relaunch.communicate(timeout=LAUNCH_TIMEOUT_SECONDS + 30)
    assert relaunch.returncode == 0, out
    assert f"Resumed from {run.checkpoint_dir}/ckpt-{step}" in out
    assert_same_state(config.run_dir, reference_dir)
    rows, reference = run.read_metrics(), RunDirectory(reference_dir).read_metrics()
    assert [row["epoch"] for row in rows] == [1, 2]
    assert rows == reference


@pytest.mark.slow
def test_sigterm_to_one_worker_stops_both_with_a_checkpoint_and_the_relaunch_resumes(
        tmp_path, stripes, two_workers_uninterrupted):
    config = tiny_config(tmp_path, stripes, **STOPPED_SETTINGS)
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
    _assert_the_relaunch_resumes(config, stopped, two_workers_uninterrupted)


def _worker(config, ports, index):
    """tools/train.py as worker ``index`` of a cluster on ``ports`` (as on two hosts,
    without the launcher that stops the others when one dies)."""
    env = dict(os.environ, TF_CONFIG=local_launcher.tf_config(ports, index))
    return subprocess.Popen([sys.executable, tool_path("train.py"), *_flags(config)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_killed_worker_is_one_line_on_the_survivor_and_the_relaunch_resumes(
        tmp_path, stripes, two_workers_uninterrupted):
    config = tiny_config(tmp_path, stripes, **STOPPED_SETTINGS)
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
    _assert_the_relaunch_resumes(config, 5, two_workers_uninterrupted)
