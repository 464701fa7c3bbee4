"""The architecture page's module table (docs/architecture.md, "Modules")
matches the tree: every module of llp_tf/ is named in it, and every path it
names exists."""

import os
import re

from tests.cli.tool_main import ROOT


def _layout_rows():
    with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
        text = f.read()
    section = text[text.index("## Modules"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    return [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| `")]


def _named_paths():
    """Every path the table names: the first cell's paths (later ones relative to
    the first one's folder) and the modules the second cell names in its folder."""
    paths = []
    for first, second in _layout_rows():
        names = re.findall(r"`([^`]+)`", first)
        folder = names[0] if names[0].endswith("/") else os.path.dirname(names[0])
        paths.append(names[0])
        paths += [os.path.join(folder, name) for name in names[1:]]
        if names[0].endswith("/"):
            paths += [os.path.join(folder, name)
                      for name in re.findall(r"`([a-z_][a-z0-9_]*\.py)`", second)]
    return paths


def test_every_named_path_exists():
    missing = [path for path in _named_paths() if not os.path.exists(os.path.join(ROOT, path))]
    assert not missing, missing


def test_every_module_of_the_package_is_named():
    named = {os.path.normpath(path) for path in _named_paths()}
    unnamed = [os.path.relpath(os.path.join(folder, name), ROOT)
               for folder, _, files in os.walk(os.path.join(ROOT, "llp_tf"))
               for name in files if name.endswith(".py") and name != "__init__.py"]
    unnamed = [path for path in unnamed if path not in named]
    assert not unnamed, unnamed
