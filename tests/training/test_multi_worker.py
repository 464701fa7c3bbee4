"""Two worker processes (MultiWorkerMirroredStrategy over loopback, one CPU each),
started by tools/launch_local.py, against one process with two CPU replicas: the step
after a checkpoint that process wrote, taken by both and compared per term to
`tests.numerics`' bounds (LLP, and FixMatch for the methods that read two streams
and two views); workers stopped and relaunched end as uninterrupted workers, bit for bit."""

import glob
import io
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from llp_tf.core import bank_statistics
from llp_tf.data.sources.registry import load_source
from llp_tf.data.splits import regime
from llp_tf.training import local_launcher, run_training
from llp_tf.training.run_directory import RunDirectory
from tests.runs import PATTERNS, assert_same_state, checkpoint_state, tiny_config, \
    write_stripes
from tests.session_cache import shared
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


def _launch(config, workers=2, **popen):
    command = [sys.executable, tool_path("launch_local.py"), f"--workers={workers}",
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


#: The sharded runs' stripes: 120 split evenly over 2, 3 and 4 replicas, one step an epoch.
SHARDED_SETTINGS = dict(warmup_epochs=1, global_batch_size=120)


@pytest.fixture(scope="module")
def stripes_120(tmp_path_factory):
    """An image folder like `stripes`' of 4 classes x (30 train + 10 validation)."""
    return shared(tmp_path_factory, "stripes-120",
                  lambda root: write_stripes(root, train_per_class=30))


@pytest.fixture(scope="module")
def two_sharding_workers(tmp_path_factory, stripes_120):
    """(the reference's config, the workers' run directory, the step's logit scale): a
    process with four replicas trains the warm-up epoch (one step) and, from a copy of its
    checkpoint, two workers of two replicas, the bank sharded over the four, train the first
    LLP epoch as it does (`_workers_after_a_copy`)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        logits = recorded_logit_scale(monkeypatch, "categorisation_loss", [0])
        reference, run_dir = _workers_after_a_copy(
            tmp_path_factory.mktemp("sharded"), stripes_120, cpu_replicas=4,
            worker_settings=dict(cpu_replicas=2, shard_bank=True), **SHARDED_SETTINGS)
    return reference, run_dir, logits


@pytest.mark.slow  # 60 s: four replicas here, then two workers of two
def test_two_workers_of_two_replicas_sharding_the_bank_take_the_replicated_step(
        two_sharding_workers):
    """The bank restored from the replicated bank's checkpoint into 2 x 2 shards: the first
    LLP step (the density refresh, the aggregation loss, propagation and the bank's writes,
    each across workers) per term against the replicated bank's, read from the checkpoint
    the workers merged."""
    assert_same_llp_step(*two_sharding_workers)
    _assert_bank_metrics_of_the_checkpoint(two_sharding_workers[0], two_sharding_workers[1])


def _assert_bank_metrics_of_the_checkpoint(reference, run_dir):
    """The bank's metrics in the run's last row, which each worker summed over its rows, are
    `bank_statistics`' of the whole bank in its newest checkpoint: float64 sums in another
    order (1e-12), but the confidences' float32 sums (each process's pairwise, then added),
    each order within log2(N) float32 roundings of the exact sum, and the mean rounded."""
    state = checkpoint_state(run_dir)
    bank = {name: state[f"bank/{name}/.ATTRIBUTES/VARIABLE_VALUE"]
            for name in ("embeddings", "labels", "confidence", "is_labelled")}
    _, used = regime.read_split_indices(RunDirectory(run_dir).split_path)
    true = load_source(reference.data.dataset).train_labels()[used]
    classes = len(PATTERNS)
    stats = bank_statistics.pseudo_label_stats(bank["labels"], bank["confidence"],
                                               bank["is_labelled"], true, classes)
    want = {"aggregation_score": bank_statistics.aggregation_scores(
                bank["embeddings"], true, classes).mean,
            "pseudo_label_accuracy": stats.accuracy, "pseudo_label_coverage": stats.coverage,
            "pseudo_label_confidence": stats.confidence}
    row = RunDirectory(run_dir).read_metrics()[-1]
    float32_sums = 2.0 ** -24 * (2 * np.ceil(np.log2(len(true))) + 2)
    for name, value in want.items():
        rel = float32_sums if name == "pseudo_label_confidence" else 1e-12
        assert row[name] == pytest.approx(value, rel=rel, abs=1e-12), name


@pytest.mark.slow  # 60 s: three replicas here, twice, and three workers
def test_their_checkpoint_takes_the_next_step_at_three_workers_and_in_one_process(
        two_sharding_workers, tmp_path, stripes_120, monkeypatch):
    """From the checkpoint the two workers wrote, the next step of three workers (one
    replica each) and of one process of three replicas, both sharded, per term against one
    process of three replicas with the replicated bank. (`test_sliced_checkpoint` shows the
    restores bit for bit.)"""
    _, run_dir, _ = two_sharding_workers
    logits = recorded_logit_scale(monkeypatch, "categorisation_loss", [0])
    settings = dict(ONE_STEP_EPOCHS, **SHARDED_SETTINGS, epochs=3)
    configs = {}
    for name, changes in (("replicated", dict(cpu_replicas=3, shard_bank=False)),
                          ("sharded", dict(cpu_replicas=3, shard_bank=True)),
                          ("workers", dict(cpu_replicas=0, shard_bank=True, cluster="auto"))):
        shutil.copytree(run_dir, tmp_path / name / "run")
        configs[name] = tiny_config(tmp_path / name, stripes_120, **settings, **changes)
    for name in ("replicated", "sharded"):
        run_training(configs[name], stream=io.StringIO())
    launcher = _launch(configs["workers"], workers=3)
    out, _ = launcher.communicate(timeout=LAUNCH_TIMEOUT_SECONDS + 30)
    assert launcher.returncode == 0, out
    assert "[worker 2] This is worker 2 of 3" in out
    for name in ("sharded", "workers"):
        assert_same_llp_step(configs["replicated"], configs[name].run_dir, logits)
    _assert_bank_metrics_of_the_checkpoint(configs["workers"], configs["workers"].run_dir)


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
