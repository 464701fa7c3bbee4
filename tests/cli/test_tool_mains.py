"""Every tool of tools/ (its module in llp_tf/cli) has a ``main(argv, stdout,
stderr)`` that runs in this process and answers --help (and absl's --helpfull)."""

import glob
import inspect
import os
import re

from tests.cli.tool_main import ROOT, load_tool, run_main

RUN_DIR = re.compile(r"--run_dir=(runs/[\w.-]+)")


def _tools():
    return sorted(name for name in os.listdir(os.path.join(ROOT, "tools"))
                  if name.endswith(".py") and not name.startswith("_"))


def _readme_commands():
    """The lines of the README and the docs pages, with a command continued by
    a backslash in a code block, or wrapped inside inline code in prose,
    joined into one line."""
    text = ""
    for path in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs",
                                                                                 "*.md"))):
        with open(path) as f:
            text += f.read()
    parts = text.split("```")
    for i, part in enumerate(parts):
        if i % 2:  # a code block
            parts[i] = part.replace("\\\n", " ")
        else:
            parts[i] = re.sub(r"`[^`]+`", lambda span: span.group(0).replace("\n", " "), part)
    return "```".join(parts).splitlines()


def _runs_the_readme_trains():
    """The run directories of the regimes' flagfiles (and the commands in their
    comments) and of the train commands of the README and the docs pages."""
    lines = _readme_commands()
    for path in glob.glob(os.path.join(ROOT, "flags", "*.flags")):
        with open(path) as f:
            lines += [line for line in f if "make train" in line or not line.startswith("#")]
    runs = set()
    for line in lines:
        if "make train" in line or "tools/train.py" in line or line.startswith("--run_dir="):
            runs.update(RUN_DIR.findall(line))
    return runs


def test_every_tool_has_main_argv_stdout_stderr_and_answers_help_in_process():
    tools = _tools()
    assert tools == ["analyze.py", "build_tfrecords.py", "check_data.py", "compare_methods.py",
                     "compare_propagation.py", "export.py", "input_service.py", "launch_local.py",
                     "linear_probe.py", "make_splits.py", "predict.py", "train.py"]
    for name in tools:
        module = load_tool(name)
        assert list(inspect.signature(module.main).parameters)[:3] == \
            ["argv", "stdout", "stderr"], name
        code, out, err = run_main(module, "--help")
        assert code == 0 and "Flags:" in out and "--[no]help:" in out, (name, err)
        assert err == "", (name, err)


def test_every_tool_answers_absls_helpfull_with_its_help():
    for name in _tools():
        module = load_tool(name)
        code, out, err = run_main(module, "--helpfull")
        assert (code, err) == (0, ""), (name, err)
        assert out == run_main(module, "--help")[1] and "--[no]help:" in out, name


def test_the_runs_named_in_help_examples_are_ones_the_readme_trains():
    trained = _runs_the_readme_trains()
    assert {"runs/demo", "runs/demo_supervised", "runs/r50_p10_q100"} <= trained
    for name in _tools():
        _, out, _ = run_main(load_tool(name), "--help")
        named = set(RUN_DIR.findall(out))
        assert named <= trained, (name, named - trained)
