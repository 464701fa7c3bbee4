"""The supervised baseline: cross-entropy on the labelled examples only.

The baseline of the paper's tables: the same model, schedule and
augmentation as LLP, trained on the labelled set alone (no memory bank). An
epoch has as many steps as an epoch of the used set, so both methods share
one schedule; the labelled set is read in passes that may run into each
other (a stream that repeats), and when it is small its records are held in
memory (the training input decides: `llp_tf.training.assembly`).
"""

import dataclasses

import keras
import tensorflow as tf

from llp_tf.core import losses
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training.methods.base import (
    InputSpec, Method, PhaseStep, StepOutput, Stream, TrainingSplit)
from llp_tf.training.methods.context import MethodContext
from llp_tf.training.step_metrics import Mean, StepMetrics, batch_mean, replica_value


@dataclasses.dataclass(frozen=True)
class SupervisedSettings:
    """The supervised baseline has no settings of its own (config section
    "supervised"): it trains with the run's optimization settings."""

    def problems(self, context: MethodContext) -> list[str]:
        return []


@dataclasses.dataclass(frozen=True)
class SupervisedMetrics(StepMetrics):
    """A supervised step's: the labelled batch's cross-entropy and the weight decay."""

    categorisation: Mean
    weight_decay: Mean


class SupervisedMethod(Method):
    """Cross-entropy on labelled examples (see the module docstring)."""

    name = "supervised"
    Settings = SupervisedSettings
    PHASES = ("supervised",)

    def __init__(self, strategy: tf.distribute.Strategy, model: EmbeddingClassifier,
                 optimizer: keras.optimizers.Optimizer, *, num_classes: int,
                 global_batch_size: int, weight_decay: float,
                 jit_compile: bool = False) -> None:
        super().__init__(strategy, model, optimizer, num_classes=num_classes,
                         global_batch_size=global_batch_size, weight_decay=weight_decay,
                         jit_compile=jit_compile)

    @classmethod
    def from_context(cls, context, strategy, model, optimizer, num_classes, split):
        del split  # The input reads the labelled set (input_spec).
        return cls(strategy, model, optimizer, num_classes=num_classes,
                   global_batch_size=context.global_batch_size,
                   weight_decay=context.weight_decay, jit_compile=context.jit_compile)

    def phase(self, epoch: int) -> str:
        return "supervised"

    def phase_step(self, phase: str) -> PhaseStep:
        return PhaseStep(self._supervised_forward, SupervisedMetrics)

    def input_spec(self, split: TrainingSplit) -> InputSpec:
        return InputSpec({"labelled": Stream(split.labelled_index, self.global_batch_size,
                                             repeats=True)})

    def _supervised_forward(self, batch):
        labelled = batch["labelled"]
        labels = tf.cast(labelled["label"], tf.int64)
        outputs = self.model(labelled["image"], training=True)
        categorisation = batch_mean(losses.categorisation_loss(outputs["logits"], labels))
        decay = self.weight_decay_penalty()
        return StepOutput(categorisation.value + decay, SupervisedMetrics(
            categorisation=categorisation, weight_decay=replica_value(decay)))
