"""The tools' JSON results files: written atomically, replacing only an earlier result of
the same tool (a JSON object holding the tool's own keys)."""

import json
import os
from typing import Any, Iterable

from llp_tf.errors import ConfigError


def check_result_file(path: str, keys: Iterable[str]) -> None:
    """Raises ConfigError unless ``path`` does not exist or is a JSON object holding
    ``keys``."""
    if not os.path.lexists(path):
        return
    try:
        with open(path) as f:
            content = json.load(f)
    except (OSError, ValueError):
        content = None
    if not isinstance(content, dict) or not set(keys) <= set(content):
        raise ConfigError(f"{path} exists and is not an earlier result of this tool (a JSON "
                          f"object with {', '.join(keys)}), so it is not replaced: give "
                          "another --output.")


def write_json_atomically(path: str, content: Any, keys: Iterable[str]) -> None:
    """Writes ``content`` as indented JSON to ``path`` atomically, after
    `check_result_file`."""
    check_result_file(path, keys)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    with open(temporary, "w") as f:
        json.dump(content, f, indent=2)
        f.write("\n")
    os.replace(temporary, path)
