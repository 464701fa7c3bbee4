"""Sizes that keep the code readable: no module over 350 lines and no function
over 60, in llp_tf/ and tools/."""

import ast
import glob
import os

from tests.tools.tool_main import ROOT

MAX_MODULE_LINES = 350
MAX_FUNCTION_LINES = 60


def _sources():
    paths = glob.glob(os.path.join(ROOT, "llp_tf", "**", "*.py"), recursive=True)
    paths += glob.glob(os.path.join(ROOT, "tools", "*.py"))
    assert len(paths) > 60
    for path in sorted(paths):
        with open(path) as f:
            yield os.path.relpath(path, ROOT), f.read()


def test_modules_and_functions_stay_small():
    too_long = []
    for path, source in _sources():
        lines = source.count("\n")
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{path}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path}: {node.name} has {length} lines")
    assert not too_long, "\n".join(too_long)
