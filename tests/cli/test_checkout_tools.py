"""tools/_checkout.py: a checkout's tools/NAME.py runs that checkout's llp_tf, also in the
Python processes it starts, whatever llp_tf the interpreter has installed, and names the
tools tools/NAME.py. Checked with a second checkout sharing this test's interpreter."""

import os
import shutil
import subprocess
import sys

import pytest

from llp_tf import tool_names
from tests.cli.tool_main import ROOT

MARKER = "Runs (the second checkout's code)"


@pytest.fixture(scope="module")
def second_checkout(tmp_path_factory):
    """A copy of this checkout's llp_tf/, tools/ and flags/ whose launcher's help starts
    with `MARKER` (a tool whose help imports no TensorFlow)."""
    other = tmp_path_factory.mktemp("second") / "checkout"
    ignored = shutil.ignore_patterns("__pycache__")
    for part in ("llp_tf", "tools", "flags"):
        shutil.copytree(os.path.join(ROOT, part), other / part, symlinks=True, ignore=ignored)
    launcher = other / "llp_tf" / "cli" / "launch_local.py"
    text = launcher.read_text()
    assert text.startswith('"""Runs a multi-worker')
    launcher.write_text(text.replace('"""Runs', f'"""{MARKER}', 1))
    return other


def _run(*command, cwd):
    """A process started outside both checkouts, without the marks of a checkout."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("PYTHONPATH", tool_names.CHECKOUT_VARIABLE)}
    return subprocess.run([sys.executable, *command], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env)


def test_a_checkouts_script_runs_its_own_code_not_the_installed_one(second_checkout):
    elsewhere = second_checkout.parent
    # The interpreter's own llp_tf is another one (this checkout's, installed editable).
    installed = _run("-c", "import llp_tf; print(llp_tf.__file__)", cwd=elsewhere)
    assert str(second_checkout) not in installed.stdout + installed.stderr
    result = _run(str(second_checkout / "tools" / "launch_local.py"), "--help", cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(MARKER)
    # Its help names the tools as the checkout's scripts.
    assert "\n  tools/launch_local.py --workers=2 -- tools/train.py --regime=demo" in \
        result.stdout
    assert "llp-train" not in result.stdout and "llp-launch-local" not in result.stdout


def test_the_python_processes_a_checkouts_tool_starts_run_its_llp_tf(second_checkout):
    worker = [sys.executable, "-c", "import llp_tf, llp_tf.tool_names as t; "
              "print(llp_tf.__file__, t.tool('train'))"]
    result = _run(str(second_checkout / "tools" / "launch_local.py"), "--workers=1",
                  "--timeout_seconds=60", "--", *worker, cwd=second_checkout.parent)
    assert result.returncode == 0, result.stderr
    assert (f"[worker 0] {second_checkout / 'llp_tf' / '__init__.py'} tools/train.py\n"
            in result.stdout), result.stdout
