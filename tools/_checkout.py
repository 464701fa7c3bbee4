"""Imported by every script of tools/ before llp_tf: puts the checkout this folder sits in
first on the import path, and on PYTHONPATH for the Python processes a tool starts, so
tools/NAME.py runs this checkout's llp_tf whatever llp_tf the interpreter has installed; and
marks the process as run from a checkout, so help and messages name the tools tools/NAME.py
(`llp_tf.tool_names`)."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

sys.path[:] = [ROOT] + [path for path in sys.path if os.path.abspath(path or ".") != ROOT]
os.environ["PYTHONPATH"] = os.pathsep.join(
    [ROOT] + [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep)
              if path and os.path.abspath(path) != ROOT])

from llp_tf import tool_names  # noqa: E402 -- this checkout's, after the path is set

tool_names.mark_checkout(ROOT)
