"""`MethodContext`: what a training method reads of its run, in place of the whole config.

`llp_tf.training.config.TrainConfig.method_context` makes it. A method's ``from_context``,
``optimizer_spec``, ``recipe`` and its settings' ``problems`` take it; none of them sees the
config's data, model or run sections. Imports no TensorFlow (the config reads it).
"""

import dataclasses
from typing import Any, Callable, Optional


@dataclasses.dataclass(frozen=True)
class MethodContext:
    """A method's own ``settings`` (its `Method.Settings`) and what it reads of the run.

    Attributes:
      settings: the method's settings dataclass.
      global_batch_size: examples per step over every replica.
      weight_decay: lambda of `losses.l2_penalty`.
      jit_compile: compile each replica's forward and backward pass with XLA.
      epochs: the run's epochs.
      seed: the run's seed (LLP's initial bank).
      learning_rate: the protocol's initial rate, scaled to the global batch.
      momentum: the protocol's SGD momentum.
      baseline_preset: the baselines' source family (``--baseline_preset``).
      baseline_optimizer: "source" or "protocol" (``--baseline_optimizer``).
      build_model: num_classes -> a new `EmbeddingClassifier` of the run's architecture and
        precision, its weights created (a baseline's moving average); None where no model
        is built (checking settings).
    """

    settings: Any
    global_batch_size: int
    weight_decay: float
    jit_compile: bool
    epochs: int
    seed: int
    learning_rate: float
    momentum: float
    baseline_preset: str
    baseline_optimizer: str
    build_model: Optional[Callable[[int], Any]] = dataclasses.field(
        default=None, repr=False, compare=False)
