"""Every tool in tools/ (but the shared modules) has a ``main(argv, stdout,
stderr)`` that runs in this process and answers --help."""

import inspect
import os

from tests.tools.tool_main import ROOT, load_tool, run_main

NOT_TOOLS = ("config_flags.py", "quiet_start.py", "tool_cli.py")


def test_every_tool_has_main_argv_stdout_stderr_and_answers_help_in_process():
    tools = sorted(name for name in os.listdir(os.path.join(ROOT, "tools"))
                   if name.endswith(".py") and name not in NOT_TOOLS)
    assert tools == ["analyze.py", "build_tfrecords.py", "check_data.py",
                     "compare_propagation.py", "export.py", "input_service.py", "launch_local.py",
                     "linear_probe.py", "make_splits.py", "predict.py", "train.py"]
    for name in tools:
        module = load_tool(name)
        assert list(inspect.signature(module.main).parameters)[:3] == \
            ["argv", "stdout", "stderr"], name
        code, out, err = run_main(module, "--help")
        assert code == 0 and "Flags:" in out and "--[no]help:" in out, (name, err)
        assert err == "", (name, err)
