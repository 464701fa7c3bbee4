"""Tiny training runs for tests: a separable image folder and small settings,
and a training process stopped at a chosen point (`DriverProcess`)."""

import os
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.training.config import TrainConfig
from tests import numerics
from tests.cli.tool_main import ROOT

#: Seconds a `DriverProcess` may take to reach its point, or to finish.
BLOCK_TIMEOUT_SECONDS = 180

SIZE = 16
PATTERNS = ("horizontal", "vertical", "diagonal", "checker")


def _pattern(kind, rng):
    """uint8 [SIZE, SIZE, 3]: a stripe pattern with a random phase, contrast and noise."""
    y, x = np.mgrid[:SIZE, :SIZE]
    phase = rng.integers(0, 4)
    wave = {"horizontal": (y + phase) // 2 % 2,
            "vertical": (x + phase) // 2 % 2,
            "diagonal": (x + y + phase) // 2 % 2,
            "checker": ((x + phase) // 3 + (y + phase) // 3) % 2}[kind]
    low, high = sorted(rng.integers(0, 256, 2))
    image = low + (high - low + 60) * wave + rng.normal(0, 12, (SIZE, SIZE))
    return np.repeat(np.clip(image, 0, 255).astype(np.uint8)[..., None], 3, axis=2)


def write_stripes(root, train_per_class=40, validation_per_class=10, seed=0):
    """Writes an image folder of 4 separable classes; returns its dataset name.

    Args:
      root: pathlib.Path, created with ``train/`` and ``validation/``
        sub-folders of PNG files, one folder per class in `PATTERNS`.
    """
    rng = np.random.default_rng(seed)
    for split, count in (("train", train_per_class), ("validation", validation_per_class)):
        for kind in PATTERNS:
            folder = root / split / kind
            folder.mkdir(parents=True)
            for i in range(count):
                png = tf.io.encode_png(_pattern(kind, rng)).numpy()
                (folder / f"{i:03d}.png").write_bytes(png)
    return f"folder:{root}"


def _tiny_settings(tmp_path, dataset, changes):
    settings = dict(run_dir=str(tmp_path / "run"), dataset=dataset, image_size=SIZE,
                    architecture="resnet10", width=0.125, small_inputs=True,
                    embedding_dim=16, label_percent=10.0, global_batch_size=32,
                    base_learning_rate=0.1, batch_norm_momentum=0.9, warmup_epochs=1,
                    epochs=3, k=3, t=5, steps_per_loop=2, checkpoint_every=3,
                    keep_checkpoints=10)
    settings.update(changes)
    return settings


def tiny_config(tmp_path, dataset, **changes):
    """A `TrainConfig` that trains in seconds on CPU, in ``tmp_path/run``."""
    return TrainConfig.from_settings(**_tiny_settings(tmp_path, dataset, changes))


def tiny_flags(tmp_path, dataset, **changes):
    """The flags of tools/train.py that make `tiny_config`'s run."""
    return [f"--{name}={value}" for name, value in
            _tiny_settings(tmp_path, dataset, changes).items()]


def file_contents(folder):
    """dict path relative to ``folder`` -> bytes of every file under it, to show
    that a tool left a folder as it was."""
    contents = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as f:
                contents[os.path.relpath(path, folder)] = f.read()
    return contents


def checkpoint_state(run_dir, step=None):
    """Every variable of the newest checkpoint of a run (or of its checkpoint of
    ``step``), by checkpoint key."""
    from llp_tf.training.run_directory import RunDirectory
    run = RunDirectory(run_dir)
    path = run.latest_checkpoint() if step is None else f"{run.checkpoint_dir}/ckpt-{step}"
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(path)
            if "save_counter" not in name and "_CHECKPOINTABLE" not in name}


def assert_same_state(run_dir, reference_dir, bank=True):
    """The newest checkpoints of two runs hold the same variables, bit for bit:
    runs of the same process layout (a resumed run against an uninterrupted
    one) compute the same operations in the same order. ``bank`` says whether
    the method keeps a memory bank (checked too)."""
    want, got = checkpoint_state(reference_dir), checkpoint_state(run_dir)
    assert set(want) == set(got)
    assert any("bank/labels" in name for name in want) == bank
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def short_name(name):
    """A checkpoint key without its ``/.ATTRIBUTES/VARIABLE_VALUE`` suffix."""
    return name.replace("/.ATTRIBUTES/VARIABLE_VALUE", "")


def assert_same_step_states(start, want, got, move_rtol, checks, compared=()):
    """Two runs' checkpoints ``want`` and ``got`` after one step from the same
    state ``start`` (`checkpoint_state`s): integers and booleans equal; the
    model's and the optimizer's variables each a group whose moves agree to
    ``move_rtol`` (`numerics.assert_same_step_moves`); an EMA ``average`` of the
    model (a <- a m + (1 - a) w, 0 <= a <= 1, or a copy) differs between the
    runs by at most the model's tolerance, plus its own rounding; every other float
    variable (short name, without its ``/.ATTRIBUTES/...`` suffix) checked by
    ``checks[name](start value, want value, got value)``, or named in
    ``compared`` (the caller compares it)."""
    assert set(got) == set(want) == set(start)
    groups, checked = {}, set()
    for name in sorted(want):
        short = short_name(name)
        if want[name].dtype.kind in "iub":
            np.testing.assert_array_equal(got[name], want[name], err_msg=short)
        elif short.split("/")[0] in ("model", "optimizer", "average"):
            groups.setdefault(short.split("/")[0], []).append(name)
        elif short not in compared:
            assert short in checks, f"{short} is not compared"
            checks[short](start[name], want[name], got[name])
            checked.add(short)
    assert checked == set(checks), set(checks) - checked
    tolerances = {group: numerics.assert_same_step_moves(
        [start[n] for n in names], [want[n] for n in names], [got[n] for n in names],
        move_rtol, what=group) for group, names in groups.items() if group != "average"}
    for name in groups.get("average", ()):
        average = np.asarray(want[name], np.float64)
        error = np.linalg.norm(np.asarray(got[name], np.float64) - average)
        bound = tolerances["model"] + 2 * numerics.U * np.linalg.norm(average)
        assert error <= bound, f"{short_name(name)}: {error:.3g} > {bound:.3g}"


class DriverProcess:
    """A `tests.training.crash_driver` process run with ``args``, its stdout and
    stderr read together; stopped by the test by its pid."""

    def __init__(self, *args):
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-m", "tests.training.crash_driver", *args],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        self.output = []

    def wait_for(self, text):
        """Reads the output until it holds ``text``; fails (and kills the
        process) after `BLOCK_TIMEOUT_SECONDS` or at its end."""
        # Raw reads: a buffered readline could hold the text back from select.
        deadline, fd = time.monotonic() + BLOCK_TIMEOUT_SECONDS, self.process.stdout.fileno()
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1.0)
            chunk = os.read(fd, 65536).decode() if ready else ""
            if ready and not chunk:
                break
            self.output.append(chunk)
            if text in self.text:
                return
        self.kill()
        pytest.fail(f"the training process did not print {text!r}:\n" + self.text)

    def wait_until_blocked(self):
        self.wait_for("BLOCKED")

    def kill(self):
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def wait_for_exit(self):
        """Waits for the process to end by itself; returns its exit code."""
        self.process.wait(timeout=BLOCK_TIMEOUT_SECONDS)
        self.output.append(self.process.stdout.read())
        return self.process.returncode

    def resume_and_finish(self):
        """Lets the blocked process go on; returns its exit code once it ends."""
        out, _ = self.process.communicate("continue\n", timeout=BLOCK_TIMEOUT_SECONDS)
        self.output.append(out)
        return self.process.returncode

    @property
    def text(self):
        return "".join(self.output)
