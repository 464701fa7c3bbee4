"""llp_tf/tool_names.py: the tools named as installed (console scripts) or as a checkout's
scripts, in messages (`tool`) and in help (`spoken`)."""

import os
import tomllib

import pytest

from llp_tf import tool_names
from tests.cli.tool_main import ROOT


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.delenv(tool_names.CHECKOUT_VARIABLE, raising=False)


@pytest.fixture
def checkout(monkeypatch):
    monkeypatch.setenv(tool_names.CHECKOUT_VARIABLE, "/src/llp-tf")


def test_the_scripts_are_pyprojects_console_scripts():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert {target.split(":")[0].rsplit(".", 1)[1]: script
            for script, target in scripts.items()} == tool_names.SCRIPTS


def test_a_tool_is_its_console_script_when_installed(installed):
    assert not tool_names.from_checkout()
    assert tool_names.tool("train") == "llp-train"
    assert tool_names.tool("linear_probe") == "llp-probe"


def test_a_tool_is_its_script_of_tools_in_a_checkout(checkout):
    assert tool_names.from_checkout()
    assert tool_names.tool("train") == "tools/train.py"
    assert tool_names.tool("linear_probe") == "tools/linear_probe.py"


TEXT = ("  python tools/build_tfrecords.py --output_dir=T \\\n"
        "  tools/train.py --regime=demo (see tools/launch_local.py), tools/linear_probe.py.\n"
        "Not ours: tools/slurm_train.sbatch, tools/notes.py, runs/tools/train.py, "
        "mytools/export.py, docs/tools/predict.py.")


def test_spoken_names_each_known_tool_by_its_console_script_when_installed(installed):
    assert tool_names.spoken(TEXT) == (
        "  llp-build-tfrecords --output_dir=T \\\n"
        "  llp-train --regime=demo (see llp-launch-local), llp-probe.\n"
        "Not ours: tools/slurm_train.sbatch, tools/notes.py, runs/tools/train.py, "
        "mytools/export.py, docs/tools/predict.py.")


def test_spoken_leaves_a_checkouts_text_as_written(checkout):
    assert tool_names.spoken(TEXT) == TEXT


def test_mark_checkout_marks_this_process_and_its_children(monkeypatch):
    monkeypatch.setenv(tool_names.CHECKOUT_VARIABLE, "")  # restored after the test
    assert not tool_names.from_checkout()
    tool_names.mark_checkout("/src/llp-tf")
    assert os.environ[tool_names.CHECKOUT_VARIABLE] == "/src/llp-tf"
    assert tool_names.tool("export") == "tools/export.py"
