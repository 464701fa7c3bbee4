"""The package's import graph has no circle, and the data and model config sections are
read without TensorFlow.

Every import statement counts, wherever it stands (module level, inside a
function, under ``if TYPE_CHECKING``): a circle through any of them means two
modules that each need the other.
"""

import ast
import os
import subprocess
import sys

from tests.cli.tool_main import ROOT

PACKAGE = "llp_tf"


def _modules():
    """dict module name -> path of every module of the package."""
    modules = {}
    for folder, _, files in os.walk(os.path.join(ROOT, PACKAGE)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                modules[".".join(parts)] = path
    return modules


def _imported(node, module, modules):
    """The package's modules an import node names (the package imports absolutely)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in modules]
    if isinstance(node, ast.ImportFrom):
        assert node.level == 0, f"{module} imports relatively; import by the full name"
        base = node.module
        names = [f"{base}.{alias.name}" for alias in node.names]
        return [name if name in modules else base for name in names
                if name in modules or base in modules]
    return []


def import_graph():
    """dict module -> set of the package's modules it imports."""
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        graph[module] = {target for node in ast.walk(tree)
                         for target in _imported(node, module, modules) if target != module}
    return graph


def circles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_imports_of_every_form():
    graph = import_graph()
    assert len(graph) > 80
    assert "llp_tf.core.hyperparameters" in graph["llp_tf.core.propagation"]
    assert "llp_tf.models.config" in graph["llp_tf.models.factory"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_package_has_no_import_circle():
    assert circles(import_graph()) == []


def test_the_data_and_model_config_sections_import_no_tensorflow():
    # The method sections are the methods' own settings, which import TensorFlow.
    code = ("import sys; from llp_tf.data.config import DataConfig; "
            "from llp_tf.models.config import ModelConfig; DataConfig(); ModelConfig(); "
            "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True, cwd=ROOT)
    assert result.stdout.strip() == "[]"
