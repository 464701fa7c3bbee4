"""Package attributes imported on first use, so a package import does not import TensorFlow."""

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, defined_in: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports each name of ``defined_in`` (name -> module) on use."""
    def __getattr__(name: str) -> Any:
        if name in defined_in:
            return getattr(importlib.import_module(defined_in[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return __getattr__
