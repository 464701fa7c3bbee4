"""Package attributes imported on first use, so that importing a package (or a
light module inside it) does not import TensorFlow."""

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, defined_in: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports each name of
    ``defined_in`` (name -> defining module) when it is first read."""
    def __getattr__(name: str) -> Any:
        if name in defined_in:
            return getattr(importlib.import_module(defined_in[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return __getattr__
