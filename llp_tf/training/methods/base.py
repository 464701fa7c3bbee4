"""The interface of a training method, and the runner of its steps.

A method (LLP, the supervised baseline) says everything that differs
between methods; the controller (`llp_tf.training.controller`) and the
`StepRunner` are the same for all. A method gives its checkpoint state
(`checkpoint_items`), its phases (`PHASES`) and phase at an epoch (`phase`)
and, per phase, its step (`phase_step`), what it needs before an epoch
(`before_epoch`) and from the input (`input_spec`), how it starts
(`initialise`), which phases feed the plateau rule (`tracks_plateau`), which
models evaluation reports (`evaluated_models`) and which checkpoint item
export and analysis read (`exported_item`).

A phase's step is a `PhaseStep`: a ``forward`` that returns a `StepOutput`
(this replica's loss, a mean over its own rows; its `StepMetrics`, of the
phase's declared class, each metric made by a reducer of
`llp_tf.training.step_metrics`; and the `BankWrite`, if any), the class of its
metrics, and an optional ``finish`` (writes after the step, e.g. a moving
average). `Method.replica_step` runs the forward under the gradient tape,
one optimizer step on loss / R (gradients are summed over the R replicas),
the bank write, then ``finish``; with ``jit_compile`` only the forward and
backward pass are XLA-compiled (docs/training.md, "GPU"). No method divides
by the global batch or the replica count.
"""

import abc
import dataclasses
from typing import Any, Callable, ClassVar, Dict, Iterator, Mapping, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from llp_tf.core import losses
from llp_tf.core.bank import Bank, BankWrite
from llp_tf.data.pipeline.streams import Stream
from llp_tf.models import batch_norm, precision
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.tensor_types import FloatTensor
from llp_tf.training.methods.context import MethodContext
from llp_tf.training.step_metrics import (
    LOSS, Mean, Metric, StepMetrics, StepRecords, replica_value)


@dataclasses.dataclass(frozen=True)
class StepOutput:
    """What a replica's forward returns: ``loss`` float32 [], this replica's loss (a mean
    over its rows, plus terms the same on every replica such as weight decay); ``metrics``,
    its phase's `StepMetrics`; ``bank_write``, the `BankWrite` the step makes after the
    gradient step (computed without gradient), or None."""

    loss: FloatTensor
    metrics: StepMetrics
    bank_write: Optional[BankWrite] = None


#: forward(batch) -> `StepOutput`, run under the gradient tape.
Forward = Callable[[dict], StepOutput]
#: finish(batch) -> None: the step's other writes, after the gradient step and the bank write.
Finish = Callable[[dict], None]


@dataclasses.dataclass(frozen=True)
class PhaseStep:
    """A phase's replica step: its ``forward``, the `StepMetrics` subclass its metrics are
    (``metrics``, their names and kinds known before tracing) and an optional ``finish``."""

    forward: Forward
    metrics: type[StepMetrics]
    finish: Optional[Finish] = None


@dataclasses.dataclass(frozen=True)
class TrainingSplit:
    """What a method may know of the run's split: the labels of the labelled
    examples, and of no other (their ground truth is for evaluation only).

    Attributes:
      labelled_index: int64 [L], sorted dataset indices of the labelled examples.
      used_index: int64 [U], sorted dataset indices of the used examples (bank
        row j is example ``used_index[j]``).
      labelled_labels: int64 [L], the class of each labelled example.
    """

    labelled_index: np.ndarray
    used_index: np.ndarray
    labelled_labels: np.ndarray


@dataclasses.dataclass(frozen=True)
class OptimizerSpec:
    """The SGD a method trains with (`Method.optimizer_spec`): ``learning_rate`` (the rate the
    run starts each epoch with), ``momentum``, ``nesterov``, and ``step_drops``: whether the
    protocol's epoch drops (``--lr_drop_epochs``, the plateau rule) apply to it; if not, the
    rate is constant and the method's `Method.learning_rate_factor` shapes it per step."""

    learning_rate: float
    momentum: float
    nesterov: bool = False
    step_drops: bool = True


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """What a method's training input reads: named `Stream`s, in order
    (`llp_tf.data.pipeline.streams`). A step's batch is ``{stream name: {"index",
    "label", view key, ...}}``, each stream's part of the global batch split
    over the replicas; "label" is -1 for an example not labelled.

    Attributes:
      streams: stream name -> `Stream`.
    """

    streams: Mapping[str, Stream]


class Method(abc.ABC):
    """A training method (see the module docstring).

    Args:
      strategy: the `tf.distribute.Strategy` the variables live in.
      model: `EmbeddingClassifier`, built in ``strategy.scope()``.
      optimizer: a Keras optimizer built for the model's trainable variables
        (a `LossScaleOptimizer` scales the loss: `precision.wrap_optimizer`).
      num_classes: int, C.
      global_batch_size: int, examples per step over all replicas.
      weight_decay: float, lambda (see `losses.l2_penalty`).
      jit_compile: compile each replica's forward and backward pass with XLA.
    """

    #: The method's name in configs, flags and the registry.
    name: ClassVar[str]
    #: The frozen dataclass of the method's settings (fields made by
    #: `llp_tf.config_fields.setting`, flag names unique over the config, and a
    #: ``problems(context) -> list[str]`` method (a `MethodContext`), whose messages name settings
    #: as ``{flag name}``, see `llp_tf.errors`): the config section named after
    #: the method, and its flags.
    Settings: ClassVar[type]
    #: The method's phases (`phase` gives an epoch's; `phase_step` each one's step).
    PHASES: ClassVar[Tuple[str, ...]]
    #: Whether the method keeps a memory bank of the used examples' embeddings
    #: (`bank`, in its checkpoint items): what export's knn signature, the
    #: embedding analysis and the propagation comparison read.
    keeps_bank: ClassVar[bool] = False
    #: The checkpoint item holding the model that export, predict, the linear
    #: probe and the analysis read (`checkpoint_items`' names, or "model").
    exported_item: ClassVar[str] = "model"

    def __init__(self, strategy: tf.distribute.Strategy, model: EmbeddingClassifier,
                 optimizer: keras.optimizers.Optimizer, *, num_classes: int,
                 global_batch_size: int, weight_decay: float,
                 jit_compile: bool = False) -> None:
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.num_classes = int(num_classes)
        self.global_batch_size = int(global_batch_size)
        self.weight_decay = float(weight_decay)
        self.jit_compile = bool(jit_compile)

    @classmethod
    @abc.abstractmethod
    def from_context(cls, context: MethodContext, strategy: tf.distribute.Strategy,
                     model: EmbeddingClassifier, optimizer: keras.optimizers.Optimizer,
                     num_classes: int, split: TrainingSplit) -> "Method":
        """The method of a run (its `MethodContext`, its settings ``context.settings``),
        for the run's `TrainingSplit`."""

    @classmethod
    def optimizer_spec(cls, context: MethodContext) -> OptimizerSpec:
        """The SGD of a run: the protocol's (``--base_learning_rate`` scaled to the batch,
        ``--momentum``, no Nesterov, the epoch drops) unless the method says."""
        return OptimizerSpec(context.learning_rate, context.momentum)

    def metric_kinds(self, phase: str) -> Dict[str, type]:
        """name -> `Mean` or `SubsetMean` of the metrics ``phase``'s step reports, in order:
        ``loss``, then its `StepMetrics`'."""
        return {LOSS: Mean, **self.phase_step(phase).metrics.kinds()}

    @abc.abstractmethod
    def phase(self, epoch: int) -> str:
        """The phase of 0-based ``epoch``."""

    @abc.abstractmethod
    def phase_step(self, phase: str) -> PhaseStep:
        """The `PhaseStep` of ``phase``."""

    @abc.abstractmethod
    def input_spec(self, split: TrainingSplit) -> InputSpec:
        """The streams the training input reads, given the run's split."""

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
    def bank(self) -> Optional[Bank]:
        """The `Bank` evaluation reads, or None."""
        return None

    def evaluated_models(self) -> Dict[str, EmbeddingClassifier]:
        """The models evaluation reports, by metric-name prefix: "" for the
        model whose metrics keep their plain names (and feed the plateau rule),
        which is the one the exported item holds."""
        return {"": self.model}

    def batch_norm_layers(self) -> list[keras.layers.Layer]:
        """The batch norms a step runs in training mode and whose moving
        statistics it updates after the forward pass: the model's."""
        return self.model.batch_norm_layers()

    # ---- shared by the replica steps ----------------------------------------

    def weight_decay_variables(self) -> list:
        """The weights ``weight_decay * sum(tf.nn.l2_loss(w))`` is taken over: the model's
        (all trainable weights but batch-norm gamma and beta) unless the method says."""
        return self.model.weight_decay_variables()

    def learning_rate_factor(self) -> Optional[FloatTensor]:
        """float32 [], the factor on the optimizer's learning rate at this step, or None (the
        rate as set per epoch). Applied to the gradients: Keras SGD's update, with Nesterov or
        not, is linear in learning rate x gradient, so this is a per-step learning rate."""
        return None

    def weight_decay_penalty(self) -> FloatTensor:
        """The weight-decay penalty, float32 [], a term of every replica's loss."""
        return losses.l2_penalty(self.weight_decay_variables(), self.weight_decay)

    def joint_logits(self, images: list[FloatTensor]) -> list[FloatTensor]:
        """The model's training-mode logits of several image batches in one
        forward pass over their concatenation (one set of batch-norm moments
        for all, as FixMatch's code does), split back: float32 [b_i, C] each."""
        sizes = [tf.shape(batch)[0] for batch in images]
        logits = self.model(tf.concat(images, axis=0), training=True)["logits"]
        return tf.split(tf.cast(logits, tf.float32), tf.stack(sizes), axis=0)

    def replica_step(self, phase: str) -> Callable[[dict], Dict[str, Metric]]:
        """The per-replica step of ``phase``: the forward under a gradient tape (with the
        batch norms' moving-statistic updates deferred), one optimizer step, the deferred
        updates, the bank write, then ``finish(batch)``; batch -> metrics by name (`LOSS`
        first). See the module docstring."""
        step = self.phase_step(phase)
        layers = self.batch_norm_layers()
        compute = self.forward_backward(step)
        compiled = tf.function(compute, jit_compile=True) if self.jit_compile else compute

        def replica_step(batch):
            gradients, metrics, bank_write, moments = compiled(batch)
            batch_norm.update_moving_statistics(layers, moments)
            self.apply_gradients(gradients)
            if bank_write is not None:
                self.bank.update(bank_write)
            if step.finish is not None:
                step.finish(batch)
            return metrics

        return replica_step

    def forward_backward(self, step: PhaseStep) -> Callable[[dict], Tuple[Any, ...]]:
        """The part of a step that ``jit_compile`` compiles: batch -> (gradients of loss / R in
        `trainable_variables` order (None where the loss does not reach), metrics by name,
        `BankWrite` or None, batch-norm moments); it writes no variable."""
        layers = self.batch_norm_layers()
        replicas = self.strategy.num_replicas_in_sync

        def compute(batch):
            with batch_norm.DeferredMovingStatistics(layers) as deferred, \
                    tf.GradientTape() as tape:
                output = step.forward(batch)
                # Gradients are summed over the replicas: each takes 1/R of its loss.
                loss = output.loss / replicas
            if type(output.metrics) is not step.metrics:
                raise TypeError(f"The forward of {type(self).__name__} returned "
                                f"{type(output.metrics).__name__}; its PhaseStep declares "
                                f"{step.metrics.__name__}.")
            variables = self.model.trainable_variables
            # Seeding the backward pass with the loss scale scales the loss.
            gradients = tape.gradient(loss, variables, output_gradients=tf.cast(
                precision.loss_scale(self.optimizer), loss.dtype))
            metrics = {LOSS: replica_value(output.loss), **output.metrics.by_name()}
            return gradients, metrics, output.bank_write, deferred.moments()

        return compute

    def apply_gradients(self, gradients: list[Optional[FloatTensor]]) -> None:
        """One optimizer step on the model's trainable variables, from their
        gradients (in `trainable_variables` order; None where the loss does not
        reach a variable)."""
        factor = self.learning_rate_factor()
        if factor is not None:
            gradients = [None if gradient is None else gradient * tf.cast(factor, gradient.dtype)
                         for gradient in gradients]
        # Variables the loss does not reach (the category head in the warm-up)
        # have no gradient; MultiWorkerMirroredStrategy's all-reduce cannot take None.
        self.optimizer.apply_gradients([
            (gradient, variable) for gradient, variable
            in zip(gradients, self.model.trainable_variables) if gradient is not None])


def split_batch(global_batch_size: int, unlabelled_ratio: int) -> tuple[int, int]:
    """(labelled, unlabelled) global batch sizes of a step that reads a labelled
    and an unlabelled stream, ``unlabelled_ratio`` (FixMatch's mu) unlabelled
    examples per labelled one: B = G // (1 + ratio) and G - B."""
    labelled = global_batch_size // (1 + unlabelled_ratio)
    return labelled, global_batch_size - labelled


class StepRunner:
    """Runs a method's steps: a `tf.while_loop` over `strategy.run`, one
    `tf.function` per phase.

    Args:
      method: the `Method`.
      prepare: optional batch -> batch run in each replica before the method's
        step (the device-side augmentation, `llp_tf.data.pipeline.streams.finish_batch`).
    """

    def __init__(self, method: Method,
                 prepare: Optional[Callable[[dict], dict]] = None) -> None:
        self.method = method
        self.prepare = prepare
        self._loops = {}
        self._on_step: Optional[Callable[[int], None]] = None

    def run(self, iterator: Iterator, num_steps: int, phase: str,
            on_step: Optional[Callable[[int], None]] = None) -> StepRecords:
        """Runs ``num_steps`` steps of ``phase`` from a distributed iterator.

        Args:
          on_step: called on the host with the number of the loop's steps done
            after each one (for progress), while the loop runs.

        Returns:
          `StepRecords` of the phase's metrics (`Method.metric_kinds`), float32
          [num_steps] each, summed over the replicas (`step_metrics`).
        """
        if phase not in self.method.PHASES:
            raise ValueError(f"{self.method.name} has the phases {self.method.PHASES}, "
                             f"not {phase!r}.")
        if phase not in self._loops:
            self._loops[phase] = tf.function(lambda it, n: self._loop(it, n, phase))
        self._on_step = on_step
        try:
            values, weights = self._loops[phase](iterator, tf.constant(num_steps, tf.int32))
        finally:
            self._on_step = None
        return StepRecords({name: value.numpy() for name, value in values.items()},
                           {name: weight.numpy() for name, weight in weights.items()})

    def _step_done(self, steps_done: np.ndarray) -> np.ndarray:
        if self._on_step is not None:
            self._on_step(int(steps_done))
        return steps_done

    def _loop(self, iterator, num_steps, phase):
        strategy = self.method.strategy
        replicas = strategy.num_replicas_in_sync
        method_step = self.method.replica_step(phase)
        kinds = self.method.metric_kinds(phase)

        def replica_step(batch):
            metrics = method_step(batch if self.prepare is None else self.prepare(batch))
            return {name: metric.shares(replicas) for name, metric in metrics.items()}

        # One record of each share: a Mean's value, a SubsetMean's numerator and weight.
        series = [(name, part) for name, kind in kinds.items()
                  for part in range(1 if kind is Mean else 2)]

        def body(i, *records):
            per_replica = strategy.run(replica_step, args=(next(iterator),))
            records = tuple(
                record.write(i, strategy.reduce(tf.distribute.ReduceOp.SUM,
                                                per_replica[name][part], axis=None))
                for record, (name, part) in zip(records, series))
            # A host call, ordered after the step's updates (on a GPU once they
            # are queued: it reads no device result, so it adds no wait).
            tf.numpy_function(self._step_done, [i + 1], tf.int32, stateful=True)
            return (i + 1,) + records

        records = tuple(tf.TensorArray(tf.float32, size=num_steps) for _ in series)
        # Steps are strictly sequential: each reads what the last one wrote.
        _, *records = tf.while_loop(lambda i, *_: i < num_steps, body, (0,) + records,
                                    parallel_iterations=1)
        stacked = {key: record.stack() for key, record in zip(series, records)}
        return ({name: stacked[name, 0] for name in kinds},
                {name: stacked[name, 1] for name, kind in kinds.items() if kind is not Mean})
