"""What the three baselines share: training as their source does (`recipes.Recipe`).

A `SourceBaseline` counts its steps (``updates``, int64 [], checkpointed by the subclass) and
from them gives the step's learning-rate factor (the recipe's schedule at progress t / S, with
``--baseline_optimizer=source``), takes weight decay over the recipe's weights with the
recipe's coefficient, and keeps a moving average of the model (`average_weights`): Mean
Teacher's teacher, the evaluated model of pseudo-label and FixMatch. With
``--baseline_optimizer=protocol`` the optimiser, schedule and weight decay are the LLP
protocol's; the loss and the average stay the source's.
"""

import abc
from typing import Optional

import keras
import tensorflow as tf

from llp_tf.data.pipeline.input_fns import steps_per_epoch
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.tensor_types import FloatTensor
from llp_tf.training.methods import recipes
from llp_tf.training.methods.base import Method, OptimizerSpec
from llp_tf.training.methods.context import MethodContext

#: Momentum of every source's SGD.
SOURCE_MOMENTUM = 0.9


def run_steps(context: MethodContext, num_used: int) -> int:
    """S, the steps of a run over ``num_used`` examples."""
    return context.epochs * steps_per_epoch(num_used, context.global_batch_size)


def build_twin(context: MethodContext, strategy: tf.distribute.Strategy,
               num_classes: int) -> EmbeddingClassifier:
    """A model of the run's architecture and precision, in ``strategy.scope()``."""
    with strategy.scope():
        return context.build_model(num_classes)


class SourceBaseline(Method):
    """A baseline trained as its source file (see the module docstring).

    Args (beyond `Method`'s):
      average: `EmbeddingClassifier` of the model's architecture, built in
        ``strategy.scope()``; its weights are set to the model's here.
      recipe: the `recipes.Recipe`; total_steps: S, the run's steps.
      source_optimizer: the recipe's schedule and weight decay (else ``weight_decay`` on the
        protocol's weights, and no per-step factor).
      ema_horizon: the average's horizon as a share of the run (the recipe's if None).
    """

    def __init__(self, strategy: tf.distribute.Strategy, model: EmbeddingClassifier,
                 optimizer: keras.optimizers.Optimizer, average: EmbeddingClassifier, *,
                 num_classes: int, global_batch_size: int, weight_decay: float,
                 recipe: recipes.Recipe, total_steps: int, source_optimizer: bool = True,
                 ema_horizon: Optional[float] = None, jit_compile: bool = False) -> None:
        super().__init__(strategy, model, optimizer, num_classes=num_classes,
                         global_batch_size=global_batch_size,
                         weight_decay=recipe.weight_decay if source_optimizer else weight_decay,
                         jit_compile=jit_compile)
        self.recipe = recipe
        self.total_steps = int(total_steps)
        self.source_optimizer = bool(source_optimizer)
        self.average = average
        self.ema_decay = recipes.ema_decay(
            recipe.ema_horizon if ema_horizon is None else ema_horizon, self.total_steps)
        with strategy.scope():
            for average_weight, weight in zip(average.weights, model.weights, strict=True):
                average_weight.assign(weight)
            self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")

    @classmethod
    @abc.abstractmethod
    def recipe(cls, context: MethodContext) -> recipes.Recipe:
        """The `recipes.Recipe` of a run (its ``--baseline_preset``); each source baseline
        names its own."""

    @classmethod
    def optimizer_spec(cls, context: MethodContext) -> OptimizerSpec:
        if context.baseline_optimizer == "protocol":
            return super().optimizer_spec(context)
        recipe = cls.recipe(context)
        return OptimizerSpec(recipe.learning_rate, SOURCE_MOMENTUM, nesterov=recipe.nesterov,
                             step_drops=False)

    # ---- the recipe ------------------------------------------------------------

    def progress(self) -> tf.Tensor:
        """float64 [], t / S: the share of the run done before this step."""
        return tf.cast(self.updates, tf.float64) / float(max(self.total_steps, 1))

    def learning_rate_factor(self) -> Optional[FloatTensor]:
        if not self.source_optimizer:
            return None
        schedule = recipes.SCHEDULES[self.recipe.schedule]
        return tf.cast(schedule(self.progress(), self.recipe.learning_rate), tf.float32)

    def weight_decay_variables(self) -> list:
        if not self.source_optimizer or self.recipe.decayed == "not_batch_norm":
            return self.model.weight_decay_variables()
        if self.recipe.decayed == "kernels":
            return [variable for variable in self.model.trainable_variables
                    if variable.path.rsplit("/", 1)[-1] == "kernel"]
        return list(self.model.trainable_variables)

    def average_weights(self) -> None:
        """average <- a * average + (1 - a) * model over the recipe's weights (float32), then
        counts the step. ``trainable``: the average takes the model's other weights (batch-norm
        statistics) as they are; ``own_statistics``: it keeps its own; ``all``: averages them
        too. With ``warm_start``, a_k = min(1 - 1/(k + 1), a) at the k-th step (1-based)."""
        alpha = tf.constant(self.ema_decay, tf.float32)
        if self.recipe.warm_start:
            done = tf.cast(self.updates + 1, tf.float32)
            alpha = tf.minimum(1.0 - 1.0 / (done + 1.0), alpha)
        averaged = self.recipe.averaged
        pairs = (zip(self.average.weights, self.model.weights, strict=True) if averaged == "all"
                 else zip(self.average.trainable_weights, self.model.trainable_weights,
                          strict=True))
        for average_weight, weight in pairs:
            average_weight.assign(alpha * average_weight + (1.0 - alpha) * weight)
        if averaged == "trainable":
            for average_weight, weight in zip(self.average.non_trainable_weights,
                                              self.model.non_trainable_weights, strict=True):
                average_weight.assign(weight)
        self.updates.assign_add(1)
