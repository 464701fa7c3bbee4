"""The annotations of every llp_tf module: present on every public function and
method, and resolvable to real types."""

import importlib
import inspect
import pkgutil
import typing

import numpy as np
import pytest

from llp_tf import tensor_types


def _package_modules():
    """Every module of the llp_tf package, by name."""
    import llp_tf
    return sorted(module.name for module in pkgutil.walk_packages(llp_tf.__path__, "llp_tf."))


#: Every module of the package: a new module is checked without being listed.
TYPED_MODULES = _package_modules()


def _type_checking_names():
    """Names that modules import only for type checkers (``if TYPE_CHECKING:``)."""
    from llp_tf.after_training.analysis.run_analysis import BankState, RunAnalysis
    from llp_tf.after_training.run_loader import TrainedRun
    from llp_tf.after_training.transduction.methods import PropagationMethod
    from llp_tf.data.sources.base import Source

    return {"BankState": BankState, "Source": Source,
            "PropagationMethod": PropagationMethod, "RunAnalysis": RunAnalysis,
            "TrainedRun": TrainedRun}


def _public_callables(module):
    """(qualified name, function) of the module's own public functions and methods."""
    for name, value in vars(module).items():
        if getattr(value, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(value) and not name.startswith("_"):
            yield name, value
        elif inspect.isclass(value):
            for member, attribute in vars(value).items():
                if isinstance(attribute, property):
                    attribute = attribute.fget
                if inspect.isfunction(attribute) and (member == "__init__"
                                                      or not member.startswith("_")):
                    yield f"{name}.{member}", attribute


@pytest.mark.parametrize("module_name", TYPED_MODULES)
def test_public_functions_are_annotated(module_name):
    module = importlib.import_module(module_name)
    functions = list(_public_callables(module))
    for name, function in functions:
        hints = typing.get_type_hints(function, localns=_type_checking_names())
        parameters = [p for p in inspect.signature(function).parameters
                      if p not in ("self", "cls")]
        missing = [p for p in parameters + ["return"] if p not in hints]
        assert not missing, f"{module_name}.{name} lacks annotations of {missing}"


def test_tensor_names_are_documentation_only():
    assert all(issubclass(t, tensor_types.Tensor) for t in (tensor_types.FloatTensor, tensor_types.IntTensor,
                                                     tensor_types.BoolTensor, tensor_types.StringTensor))
    assert tensor_types.Array is np.ndarray


def test_every_module_is_checked():
    assert {"llp_tf.core.memory_bank", "llp_tf.training.run_lock",
            "llp_tf.after_training.export.saved_model"} <= set(TYPED_MODULES)
    checked = sum(len(list(_public_callables(importlib.import_module(name))))
                  for name in TYPED_MODULES)
    assert len(TYPED_MODULES) > 50 and checked > 300

