"""pyproject.toml: the ranges hold the pinned versions of requirements*.txt, the
version is written once (llp_tf.__version__), every tool has its console script, the
regimes ship as the package's data, and the console scripts of an installed wheel name
themselves (no tools/ path of a checkout)."""

import ast
import glob
import importlib
import inspect
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib

import pytest
from packaging.requirements import Requirement

from llp_tf.data.sources import imagenet_names
from tests.cli.tool_main import ROOT

PINNED = ("requirements.txt", "requirements-bench.txt")


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def _ranges():
    """dict package name -> its Requirement of pyproject.toml (dependencies and extras;
    this package's own extras left out)."""
    project = _project()["project"]
    texts = project["dependencies"] + [
        text for extra in project["optional-dependencies"].values() for text in extra]
    ranges = {}
    for requirement in map(Requirement, texts):
        if requirement.name != project["name"]:
            ranges.setdefault(requirement.name.lower().replace("_", "-"), requirement)
    return ranges


def _pins():
    """dict package name -> its pinned version in requirements*.txt."""
    pins = {}
    for name in PINNED:
        with open(os.path.join(ROOT, name)) as f:
            for line in f:
                line = line.split("#")[0].strip()
                if line:
                    package, version = line.split("==")
                    pins[package.lower().replace("_", "-")] = version
    return pins


def test_every_pinned_version_is_in_its_range_and_every_range_is_pinned():
    ranges, pins = _ranges(), _pins()
    assert sorted(ranges) == sorted(pins)
    outside = [f"{name}=={version} not in {ranges[name]}" for name, version in pins.items()
               if not ranges[name].specifier.contains(version)]
    assert not outside, outside
    assert all(str(requirement.specifier) for requirement in ranges.values())


def test_the_version_is_written_once():
    project = _project()
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "llp_tf.__version__"}
    with open(os.path.join(ROOT, "llp_tf", "__init__.py")) as f:
        tree = ast.parse(f.read())
    versions = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and [target.id for target in node.targets] == ["__version__"]]
    assert len(versions) == 1 and versions[0].count(".") == 2


def test_every_tool_has_a_console_script_and_a_script_in_tools():
    scripts = _project()["project"]["scripts"]
    modules = sorted(os.path.basename(path)[:-3]
                     for path in glob.glob(os.path.join(ROOT, "llp_tf", "cli", "*.py"))
                     if "__main__" in open(path).read())
    assert sorted(target.split(":")[0] for target in scripts.values()) == [
        f"llp_tf.cli.{name}" for name in modules]
    assert len(modules) == 12
    for script, target in scripts.items():
        module_name, function = target.split(":")
        assert script == "llp-" + module_name.rsplit(".", 1)[1].replace("_", "-").replace(
            "linear-", ""), script
        # A console script calls main() with no argument: argv defaults to sys.argv.
        signature = inspect.signature(getattr(importlib.import_module(module_name), function))
        assert signature.parameters["argv"].default is None, script
        with open(os.path.join(ROOT, "tools", module_name.rsplit(".", 1)[1] + ".py")) as f:
            assert f"from llp_tf.cli import {module_name.rsplit('.', 1)[1]}\n" in f.read()


def test_the_regimes_are_package_data():
    link = os.path.join(ROOT, "llp_tf", "flags")
    assert os.path.islink(link) and os.readlink(link) == os.path.join("..", "flags")
    patterns = _project()["tool"]["setuptools"]["package-data"]["llp_tf"]
    shipped = {path for pattern in patterns
               for path in glob.glob(os.path.join(ROOT, "llp_tf", pattern))}
    regimes = glob.glob(os.path.join(ROOT, "flags", "*"))
    assert "demo.flags" in map(os.path.basename, regimes)
    assert sorted(os.path.basename(path) for path in shipped if path.endswith(".flags")) == \
        sorted(map(os.path.basename, regimes))


def test_the_imagenet_class_names_are_package_data():
    patterns = _project()["tool"]["setuptools"]["package-data"]["llp_tf"]
    shipped = {path for pattern in patterns
               for path in glob.glob(os.path.join(ROOT, "llp_tf", pattern))}
    assert imagenet_names.NAMES_FILE in shipped


def _install_wheel(folder):
    """Builds this checkout's wheel from a copy of its package files and installs it in a
    new virtual environment in ``folder`` that finds the dependencies in this interpreter's
    site-packages (a path, so this checkout's editable install there is not loaded);
    returns the environment's bin folder."""
    source = folder / "source"
    ignored = shutil.ignore_patterns("__pycache__")
    for part in ("llp_tf", "flags"):
        shutil.copytree(os.path.join(ROOT, part), source / part, symlinks=True, ignore=ignored)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w",
                    str(folder / "dist"), str(source)], check=True, timeout=300,
                   capture_output=True)
    environment = folder / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(environment)],
                   check=True, timeout=120)
    python = environment / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"], check=True,
                          capture_output=True, text=True, timeout=60).stdout.strip()
    with open(os.path.join(site, "dependencies.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index",
                    *glob.glob(str(folder / "dist" / "*.whl"))], check=True, timeout=300,
                   capture_output=True)
    return environment / "bin"


@pytest.mark.slow  # 50-70 s: a wheel built and installed, 13 tools started (TensorFlow)
def test_the_installed_console_scripts_help_names_them_and_no_checkout_path(tmp_path):
    bin_folder = _install_wheel(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {name: value for name, value in os.environ.items()
           if name not in ("PYTHONPATH", "LLP_TF_CHECKOUT")}

    def run(*command):
        return subprocess.run(command, capture_output=True, text=True, timeout=180,
                              cwd=elsewhere, env=env)

    package = run(str(bin_folder / "python"), "-c", "import llp_tf; print(llp_tf.__file__)")
    assert package.stdout.startswith(str(tmp_path / "env")), package
    for script in _project()["project"]["scripts"]:
        result = run(str(bin_folder / script), "--help")
        assert result.returncode == 0, (script, result.stderr)
        assert "tools/" not in result.stdout + result.stderr, (script, result.stdout)
        # Its examples are written with the name the user ran.
        assert f"\n  {script} " in result.stdout, (script, result.stdout)
    # And a hint that names another tool.
    result = run(str(bin_folder / "llp-predict"), "image.png")
    assert result.returncode == 1
    assert result.stderr == "error: give --model_dir, a SavedModel written by llp-export.\n"
