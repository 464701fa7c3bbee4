"""Loading a tool script and running its ``main`` in this process."""

import importlib.util
import io
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tool_path(file_name):
    """Path of tools/<file_name>."""
    return os.path.join(ROOT, "tools", file_name)


def load_tool(file_name):
    """The module of tools/<file_name> (tools/ is not a package), loaded under a
    private name so it cannot clash with a module of the same name. tools/ goes
    on the import path (for `tool_cli`), also for tests outside tests/tools."""
    tools_dir = os.path.dirname(tool_path(file_name))
    if tools_dir not in sys.path:
        sys.path.insert(0, tools_dir)
    name = os.path.splitext(file_name)[0] + "_tool"
    spec = importlib.util.spec_from_file_location(name, tool_path(file_name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_main(module, *args):
    """(exit code, stdout, stderr) of ``module.main(argv, stdout=, stderr=)``."""
    stdout, stderr = io.StringIO(), io.StringIO()
    code = module.main([os.path.basename(module.__file__), *args], stdout=stdout, stderr=stderr)
    return code, stdout.getvalue(), stderr.getvalue()
