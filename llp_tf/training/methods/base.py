"""The interface of a training method, and the runner of its steps.

A method (LLP, the supervised baseline) says everything that differs
between methods; the controller (`llp_tf.training.controller`) and the
`StepRunner` are the same for all:

- the state it adds to the checkpoint (`checkpoint_items`);
- its phase at an epoch (`phase`) and, per phase, its replica step
  (`replica_step`) and metric names (`metric_names`);
- what it needs before an epoch (`before_epoch`) and from the input
  (`input_spec`);
- how it starts (`initialise`) and which phases feed the plateau rule
  (`tracks_plateau`).

A replica step returns, for each metric name, its share of the global-batch
mean (a sum divided by the global batch size), so the runner sums replicas.
"""

import abc
import dataclasses
from typing import Callable, ClassVar, Dict, Iterator, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from llp_tf.core import losses
from llp_tf.core.memory_bank import MemoryBank
from llp_tf.models.llp_model import LLPModel
from llp_tf.types import FloatTensor


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """What a method's training input reads.

    Attributes:
      index: int64 [U], the dataset indices of the examples read.
      batches_cross_passes: let passes over ``index`` run into each other (a
        set smaller than one batch can be trained on; wrong where examples
        index a memory bank).
      cache_passes: hold the examples' records in memory across passes.
    """

    index: np.ndarray
    batches_cross_passes: bool = False
    cache_passes: bool = False


class Method(abc.ABC):
    """A training method (see the module docstring).

    Args:
      strategy: the `tf.distribute.Strategy` the variables live in.
      model: `LLPModel`, built in ``strategy.scope()``.
      optimizer: a Keras optimizer built for the model's trainable variables.
      num_classes: int, C.
      global_batch_size: int, examples per step over all replicas.
      weight_decay: float, lambda (see `losses.l2_penalty`).
    """

    #: The method's name in configs, flags and the registry.
    name: ClassVar[str]
    #: Metric names by phase.
    METRICS: ClassVar[Dict[str, Tuple[str, ...]]]

    def __init__(self, strategy: tf.distribute.Strategy, model: LLPModel,
                 optimizer: keras.optimizers.Optimizer, *, num_classes: int,
                 global_batch_size: int, weight_decay: float) -> None:
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.num_classes = int(num_classes)
        self.global_batch_size = int(global_batch_size)
        self.weight_decay = float(weight_decay)

    @property
    def phases(self) -> Tuple[str, ...]:
        return tuple(self.METRICS)

    def metric_names(self, phase: str) -> Tuple[str, ...]:
        """The names of the metrics ``replica_step(phase)`` returns."""
        return self.METRICS[phase]

    @abc.abstractmethod
    def phase(self, epoch: int) -> str:
        """The phase of 0-based ``epoch``."""

    @abc.abstractmethod
    def replica_step(self, phase: str) -> Callable[[dict], Dict[str, tf.Tensor]]:
        """The per-replica step of ``phase``: batch dict -> metric shares (float32 [])."""

    @abc.abstractmethod
    def input_spec(self, labeled_index: np.ndarray, used_index: np.ndarray) -> InputSpec:
        """The examples the training input reads, given the run's split."""

    def checkpoint_items(self) -> Dict[str, tf.Module]:
        """State the method adds to the run's checkpoint, by item name."""
        return {}

    def before_epoch(self, epoch: int, phase: str) -> None:
        """Runs before the steps of ``epoch`` (also when resuming inside it)."""

    def initialise(self, steps_per_epoch: int) -> Optional[Tuple[int, str]]:
        """Starts a new run from outside state; returns (first step, message) or None."""
        return None

    def tracks_plateau(self, phase: str) -> bool:
        """Whether evaluations in ``phase`` feed the plateau rule."""
        return True

    @property
    def bank(self) -> Optional[MemoryBank]:
        """The `MemoryBank` evaluation reads, or None."""
        return None

    # ---- shared by the replica steps ----------------------------------------

    def weight_decay_share(self) -> FloatTensor:
        """This replica's share of the weight-decay penalty, float32 [].

        Gradients are summed over replicas, so each replica adds 1/R of it.
        """
        replicas = self.strategy.num_replicas_in_sync
        return losses.l2_penalty(self.model.weight_decay_variables(),
                                 self.weight_decay) / replicas

    def apply_gradients(self, tape: tf.GradientTape, loss: FloatTensor) -> None:
        """One optimizer step on the model's trainable variables."""
        variables = self.model.trainable_variables
        gradients = tape.gradient(loss, variables)
        # Variables the loss does not reach (the category head in the warm-up)
        # have no gradient; MultiWorkerMirroredStrategy's all-reduce cannot take None.
        self.optimizer.apply_gradients([(gradient, variable) for gradient, variable
                                        in zip(gradients, variables) if gradient is not None])


class StepRunner:
    """Runs a method's steps: a `tf.while_loop` over `strategy.run`, one
    `tf.function` per phase."""

    def __init__(self, method: Method) -> None:
        self.method = method
        self._loops = {}

    def run(self, iterator: Iterator, num_steps: int, phase: str) -> Dict[str, np.ndarray]:
        """Runs ``num_steps`` steps of ``phase`` from a distributed iterator.

        Returns:
          dict of metric name -> float32 numpy [num_steps], each the mean over
          the step's global batch.
        """
        if phase not in self.method.phases:
            raise ValueError(f"{self.method.name} has the phases {self.method.phases}, "
                             f"not {phase!r}.")
        if phase not in self._loops:
            self._loops[phase] = tf.function(lambda it, n: self._loop(it, n, phase))
        results = self._loops[phase](iterator, tf.constant(num_steps, tf.int32))
        return {name: value.numpy() for name, value in results.items()}

    def _loop(self, iterator, num_steps, phase):
        strategy = self.method.strategy
        replica_step = self.method.replica_step(phase)
        names = self.method.metric_names(phase)

        def body(i, *records):
            per_replica = strategy.run(replica_step, args=(next(iterator),))
            # Replicas return sums divided by the global batch: their sum is the mean.
            records = tuple(
                record.write(i, strategy.reduce(tf.distribute.ReduceOp.SUM,
                                                per_replica[name], axis=None))
                for record, name in zip(records, names))
            return (i + 1,) + records

        records = tuple(tf.TensorArray(tf.float32, size=num_steps) for _ in names)
        # Steps are strictly sequential: each reads what the last one wrote.
        _, *records = tf.while_loop(lambda i, *_: i < num_steps, body, (0,) + records,
                                    parallel_iterations=1)
        return {name: record.stack() for name, record in zip(names, records)}
