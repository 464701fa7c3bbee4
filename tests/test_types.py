"""The annotations of the typed modules: present on every public function and method,
and resolvable to real types."""

import importlib
import inspect
import typing

import numpy as np
import pytest

from llp_tf import types

TYPED_MODULES = [
    "llp_tf.core.label_encoding", "llp_tf.core.losses", "llp_tf.core.memory_bank",
    "llp_tf.core.propagation",
    "llp_tf.data", "llp_tf.data.augment", "llp_tf.data.decode",
    "llp_tf.data.embedded", "llp_tf.data.epoch_order", "llp_tf.data.folder_source",
    "llp_tf.data.label_subsets", "llp_tf.data.pipeline", "llp_tf.data.shards",
    "llp_tf.data.source", "llp_tf.data.splits", "llp_tf.data.tfds_source",
    "llp_tf.data.tfrecord_builder", "llp_tf.data.tfrecord_source",
    "llp_tf.models.batch_norm", "llp_tf.models.factory", "llp_tf.models.llp_model",
    "llp_tf.models.resnet_v2",
    "llp_tf.training.actions", "llp_tf.training.config", "llp_tf.training.controller",
    "llp_tf.training.distribution", "llp_tf.training.evaluation", "llp_tf.training.metrics",
    "llp_tf.training.methods.base", "llp_tf.training.methods.llp",
    "llp_tf.training.methods.supervised", "llp_tf.training.progress",
    "llp_tf.training.run_directory", "llp_tf.training.schedule",
    "llp_tf.training.training_run",
    "llp_tf.after_training.analysis", "llp_tf.after_training.analysis_figures",
    "llp_tf.after_training.analysis_report", "llp_tf.after_training.analysis_summary",
    "llp_tf.after_training.dlp_diffusion", "llp_tf.after_training.export",
    "llp_tf.after_training.features", "llp_tf.after_training.inference_module",
    "llp_tf.after_training.linear_probe", "llp_tf.after_training.mds",
    "llp_tf.after_training.propagation_baselines",
    "llp_tf.after_training.propagation_protocol", "llp_tf.after_training.readout",
    "llp_tf.after_training.trained_run", "llp_tf.after_training.transduction",
]


def _type_checking_names():
    """Names that modules import only for type checkers (``if TYPE_CHECKING:``)."""
    from llp_tf.after_training.analysis import BankState, RunAnalysis
    from llp_tf.after_training.propagation_baselines import PropagationMethod
    from llp_tf.training.config import ModelConfig

    return {"BankState": BankState, "ModelConfig": ModelConfig,
            "PropagationMethod": PropagationMethod, "RunAnalysis": RunAnalysis}


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
    assert functions
    for name, function in functions:
        hints = typing.get_type_hints(function, localns=_type_checking_names())
        parameters = [p for p in inspect.signature(function).parameters
                      if p not in ("self", "cls")]
        missing = [p for p in parameters + ["return"] if p not in hints]
        assert not missing, f"{module_name}.{name} lacks annotations of {missing}"


def test_tensor_names_are_documentation_only():
    assert all(issubclass(t, types.Tensor) for t in (types.FloatTensor, types.IntTensor,
                                                     types.BoolTensor, types.StringTensor))
    assert types.Array is np.ndarray
