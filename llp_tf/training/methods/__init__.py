"""Training methods, registered by name.

`METHODS` is the one table of methods: name -> (defining module, class name).
The config's and the flags' choices of ``--method`` come from it, and
`method_class` imports a method's class; the first entry is the default
``--method``. A new method subclasses `base.Method` in a module of its own
(with its settings beside it) and adds one line here. Names are
imported on first use, so the config reads the table without TensorFlow.
"""

import importlib

from llp_tf.lazy_attributes import lazy_getattr

METHODS = {
    "llp": ("llp_tf.training.methods.llp", "LLPMethod"),
    "supervised": ("llp_tf.training.methods.supervised", "SupervisedMethod"),
    "pseudo_label": ("llp_tf.training.methods.pseudo_label", "PseudoLabelMethod"),
    "mean_teacher": ("llp_tf.training.methods.mean_teacher", "MeanTeacherMethod"),
    "fixmatch": ("llp_tf.training.methods.fixmatch", "FixMatchMethod"),
}
#: The default ``--method``: the paper's.
DEFAULT_METHOD = next(iter(METHODS))

__getattr__ = lazy_getattr(__name__, {
    "InputSpec": "llp_tf.training.methods.base", "Method": "llp_tf.training.methods.base",
    "StepRunner": "llp_tf.training.methods.base", "TrainingSplit": "llp_tf.training.methods.base",
    **{class_name: module for module, class_name in METHODS.values()}})


def method_class(name: str) -> type:
    """The `base.Method` subclass registered as ``name`` (a key of `METHODS`)."""
    module, class_name = METHODS[name]
    return getattr(importlib.import_module(module), class_name)
