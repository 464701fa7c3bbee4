"""The package is built in layers: a module imports its own part of the package
and the layers below it, never a layer above, and never a part beside it in its
own layer.

Every import counts wherever it stands (module level, inside a function, under
``if TYPE_CHECKING``), and so does a module named by a string (the tables of
names imported on first use, `llp_tf.lazy_attributes`, and of methods). Nothing
in the package imports the scripts of tools/ or the benchmarks; the entry points'
modules, llp_tf.cli, are the top layer.
"""

import ast

import pytest

from tests.test_import_graph import _modules, import_graph

PACKAGE = "llp_tf"
HELPERS = "llp_tf (top-level modules)"

# From the bottom up; the parts in one layer do not import each other. The top-level
# modules of llp_tf (config_fields, counted_nouns, errors, lazy_attributes, result_files,
# types) are one part, `HELPERS`; llp_tf.cli, the entry points (flags read, one call into
# the library), and beside them llp_tf.runs, the Python API, over the functions the tools
# call (a regime read by `llp_tf.training.regimes`, as the train tool reads it), and
# keras_registration; llp_tf's own __init__ names the public API, from core, data and runs,
# at the top.
LAYERS = (
    (HELPERS,),
    ("llp_tf.core",),
    ("llp_tf.data", "llp_tf.models"),
    ("llp_tf.training",),
    ("llp_tf.after_training",),
    ("llp_tf.cli", "llp_tf.runs", "llp_tf.keras_registration"),
    ("llp_tf",),
)
# Inside llp_tf.data, from the bottom up. "llp_tf.data" itself: its config section and
# the dispatcher addresses that section checks, which import no TensorFlow.
DATA_LAYERS = (
    ("llp_tf.data",),
    ("llp_tf.data.decoding",),
    ("llp_tf.data.sources",),
    ("llp_tf.data.splits", "llp_tf.data.augmentation"),
    ("llp_tf.data.pipeline",),
)
OUTSIDE = ("tools", "benchmarks", "tests")


def part(module, layers):
    """The part of ``layers`` that ``module`` belongs to: the longest that holds it."""
    parts = [name for layer in layers for name in layer
             if module == name or name != PACKAGE and module.startswith(name + ".")]
    if not parts and module.count(".") == 1 and HELPERS in layers[0]:
        return HELPERS
    return max(parts, key=len) if parts else None


def upward(graph, layers):
    """The edges ``importer -> imported`` of ``graph`` whose imported part is not
    below the importer's, among the modules ``layers`` places."""
    level = {name: k for k, layer in enumerate(layers) for name in layer}
    found = []
    for module, targets in sorted(graph.items()):
        here = part(module, layers)
        for target in sorted(targets):
            there = part(target, layers)
            if None not in (here, there) and here != there and level[there] >= level[here]:
                found.append(f"{module} -> {target}")
    return found


def named_modules():
    """dict module -> the package's modules it names by their dotted name as a whole
    string constant (not "llp_tf" alone, a word such as a cache folder's name)."""
    modules = _modules()
    named = {}
    for module, path in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        named[module] = {node.value for node in ast.walk(tree)
                         if isinstance(node, ast.Constant) and node.value in modules
                         and "." in node.value and node.value != module}
    return named


def references():
    """dict module -> the package's modules it imports or names."""
    graph = import_graph()
    for module, named in named_modules().items():
        graph[module] |= named
    return graph


def test_every_module_has_a_layer():
    unplaced = [module for module in _modules() if part(module, LAYERS) is None]
    assert not unplaced, unplaced
    data = [module for module in _modules() if module.startswith("llp_tf.data")]
    assert all(part(module, DATA_LAYERS) for module in data)


def test_the_check_finds_upward_and_sideways_imports():
    graph = {"llp_tf.core.losses": {"llp_tf.errors", "llp_tf.training.schedule"},
             "llp_tf.errors": {"llp_tf.tensor_types"},
             "llp_tf.data.sources.base": {"llp_tf.models.config", "llp_tf.data.config"},
             "llp_tf.data.splits.regime": {"llp_tf.data.augmentation.views"},
             "llp_tf.data.pipeline.streams": {"llp_tf.data.splits.regime"},
             "llp_tf.after_training.export.saved_model": {"llp_tf.cli.command_line"},
             "llp_tf.cli.train": {"llp_tf.training.config", "llp_tf.cli.command_line"}}
    assert upward(graph, LAYERS) == ["llp_tf.after_training.export.saved_model -> "
                                     "llp_tf.cli.command_line",
                                     "llp_tf.core.losses -> llp_tf.training.schedule",
                                     "llp_tf.data.sources.base -> llp_tf.models.config"]
    assert upward(graph, DATA_LAYERS) == [
        "llp_tf.data.splits.regime -> llp_tf.data.augmentation.views"]
    assert "llp_tf.training.methods.llp" in references()["llp_tf.training.methods"]


@pytest.mark.parametrize("layers", [LAYERS, DATA_LAYERS], ids=["llp_tf", "llp_tf.data"])
def test_nothing_imports_upward(layers):
    assert upward(references(), layers) == []


def test_the_package_imports_no_tool_benchmark_or_test():
    found = []
    for module, path in _modules().items():
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{module} -> {name}" for name in names
                      if name.split(".")[0] in OUTSIDE]
    assert not found, found
