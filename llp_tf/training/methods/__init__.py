"""Training methods, registered by name.

`METHODS` is the one table of methods: the config's and the flags' choices
of ``--method`` come from it. A new method subclasses `Method` and is added
here.
"""

from llp_tf.training.methods.base import InputSpec, Method, StepRunner
from llp_tf.training.methods.llp import PROPAGATIONS, LLPMethod
from llp_tf.training.methods.supervised import SupervisedMethod

METHODS = {method.name: method for method in (LLPMethod, SupervisedMethod)}

__all__ = ["METHODS", "PROPAGATIONS", "InputSpec", "LLPMethod", "Method", "StepRunner",
           "SupervisedMethod"]
