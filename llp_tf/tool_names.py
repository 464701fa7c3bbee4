"""The names the user runs the tools by, and so the names help and messages give them:
``llp-NAME``, the console scripts of the installed package (pyproject.toml's
[project.scripts]), or ``tools/NAME.py`` when a checkout's script started the process (it
calls `mark_checkout`, and the Python processes it starts inherit the mark). Imports nothing
of llp_tf."""

import os
import re

#: Set to the checkout's folder in the environment of a process a tools/NAME.py started.
CHECKOUT_VARIABLE = "LLP_TF_CHECKOUT"

#: Each tool (its module in llp_tf.cli) -> its console script.
SCRIPTS = {
    "train": "llp-train",
    "export": "llp-export",
    "predict": "llp-predict",
    "linear_probe": "llp-probe",
    "analyze": "llp-analyze",
    "compare_propagation": "llp-compare-propagation",
    "compare_methods": "llp-compare-methods",
    "make_splits": "llp-make-splits",
    "build_tfrecords": "llp-build-tfrecords",
    "check_data": "llp-check-data",
    "input_service": "llp-input-service",
    "launch_local": "llp-launch-local",
}

#: A checkout's name of a tool in text this package wrote (``python `` before it optional).
_CHECKOUT_NAME = re.compile(r"(?<![\w./-])(?:python3? )?tools/(\w+)\.py\b")


def mark_checkout(root: str) -> None:
    """Marks this process, and the ones it starts, as run from the checkout in ``root``."""
    os.environ[CHECKOUT_VARIABLE] = root


def from_checkout() -> bool:
    """Whether a checkout's tools/NAME.py started this process (or the one that started it)."""
    return bool(os.environ.get(CHECKOUT_VARIABLE))


def tool(name: str) -> str:
    """How the user runs the tool ``name`` (its module in llp_tf.cli, e.g. "train"):
    "tools/train.py" from a checkout, else its console script, "llp-train"."""
    return f"tools/{name}.py" if from_checkout() else SCRIPTS[name]


def spoken(text: str) -> str:
    """``text`` (this package's own words: a tool's usage and flag help, never user input)
    with each tools/NAME.py, and ``python tools/NAME.py``, named by `tool`."""
    if from_checkout():
        return text
    return _CHECKOUT_NAME.sub(lambda match: SCRIPTS.get(match[1], match[0]), text)
