"""Loading a tool's module (llp_tf.cli) or a benchmark script and running its ``main``
in this process."""

import importlib
import importlib.util
import io
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tool_path(file_name):
    """Path of tools/<file_name>."""
    return os.path.join(ROOT, "tools", file_name)


def load_tool(file_name):
    """The module llp_tf.cli.<name> that tools/<file_name> runs."""
    return importlib.import_module("llp_tf.cli." + os.path.splitext(file_name)[0])


def load_script(path, suffix):
    """The module of the script at ``path`` (benchmarks/ is not a package),
    loaded under its name plus ``suffix`` so it cannot clash with a module of
    the same name. Its folder goes on the import path (for `bench_cli`), also
    for tests outside the folder's tests."""
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = os.path.splitext(os.path.basename(path))[0] + suffix
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_main(module, *args):
    """(exit code, stdout, stderr) of ``module.main(argv, stdout=, stderr=)``."""
    stdout, stderr = io.StringIO(), io.StringIO()
    code = module.main([os.path.basename(module.__file__), *args], stdout=stdout, stderr=stderr)
    return code, stdout.getvalue(), stderr.getvalue()
