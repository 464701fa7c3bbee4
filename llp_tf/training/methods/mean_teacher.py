"""Mean Teacher (Tarvainen & Valpola 2017) as a training method, whole from one source per family.

Two models of the same architecture: the student, trained by SGD, and the teacher, an
exponential moving average of the student (`SourceBaseline.average_weights`). One phase,
``"mean_teacher"``. ``--baseline_preset`` picks the source (`MeanTeacherSettings`,
`llp_tf.training.methods.recipes`); with ``t`` the steps done before this one and ``S`` the
run's steps:

- ``fixmatch_cifar``: google-research/fixmatch ``mean_teacher.py``. A step reads a labelled
  batch (B images, one weak view) and an unlabelled batch (U images of the used set, labelled
  ones too, their labels never read), each unlabelled image in a ``"student"`` and a
  ``"teacher"`` weak view. The student passes the labelled images (whose batch-norm moments
  update its moving statistics), then the unlabelled student views (statistics kept); the
  teacher passes the teacher views in training mode without gradient. loss = sum over the
  labelled batch of the cross-entropy / B + w(t) * sum over the unlabelled batch of the
  consistency / U + weight decay, ``w(t) = w_max * min(1, t / (r S))``. The teacher averages
  the trainable weights and takes the student's batch-norm statistics (``model_vars``).
- ``imagenet``: CuriousAI/mean-teacher ``pytorch/experiments/imagenet_valid.py`` and
  ``pytorch/main.py``. Every image, labelled or not, comes in both views; the student passes
  all student views in one pass, the teacher all teacher views in one (its own batch-norm
  statistics updated, as a PyTorch model in train mode). loss = sum over the labelled images
  of the cross-entropy / (B + U) + w(t) * sum over all images of the consistency / (B + U),
  ``w(t) = w_max * exp(-5 (1 - min(1, t / (r S)))^2)``. The teacher averages the parameters.
  The source's second logit head (cost 0.01) is not built: the model has one category head.

The consistency is ``sum_c (p_student - p_teacher)^2 / C`` (``mse``) or
``KL(p_teacher || p_student)`` (``kl``), no gradient into the teacher. Checkpoint items:
``teacher`` (the model) and ``teacher_updates`` (t). Evaluation reports the teacher under the
plain validation names (``val_top1``) and the student with its name after the prefix
(``val_student_top1``); export, predict, the linear probe and the analysis read the teacher.
"""

import dataclasses
from typing import Any, Optional

import keras
import tensorflow as tf

from llp_tf.config_fields import setting
from llp_tf.core import losses
from llp_tf.data.augmentation import views
from llp_tf.data.pipeline.streams import Stream
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training.methods import recipes
from llp_tf.training.methods.recipes import linear_rampup, sigmoid_rampup
from llp_tf.training.methods.base import (
    InputSpec, PhaseStep, StepOutput, TrainingSplit, split_batch)
from llp_tf.training.methods.context import MethodContext
from llp_tf.training.methods.source_baseline import SourceBaseline, build_twin, run_steps
from llp_tf.training.step_metrics import Mean, StepMetrics, batch_mean, replica_value
from llp_tf.tensor_types import FloatTensor

#: How the student's softmax is compared with the teacher's.
CONSISTENCY_TYPES = ("mse", "kl")
#: The views of every unlabelled example (every example, ImageNet's): one for each model.
UNLABELLED_VIEWS = {"student": views.WEAK, "teacher": views.WEAK}
#: How the consistency weight rises over its ramp: mean_teacher.py's linear one, or the MT
#: releases' sigmoid exp(-5 (1 - x)^2) (pytorch/mean_teacher/ramps.py sigmoid_rampup).
RAMPS = ("linear", "sigmoid")
#: Each family's values, by setting (docs/methods.md names each one's source).
PRESETS = {
    "fixmatch_cifar": dict(consistency_weight=50.0, consistency_type="mse",
                           consistency_rampup=0.4, unlabelled_ratio=1),
    # 5 of 60 epochs; 20 labelled and 20 unlabelled images of 40 a GPU.
    "imagenet": dict(consistency_weight=10.0, consistency_type="kl",
                     consistency_rampup=5 / 60, unlabelled_ratio=1),
}
#: The consistency ramp's shape, by family.
RAMP_OF = {"fixmatch_cifar": "linear", "imagenet": "sigmoid"}


@dataclasses.dataclass(frozen=True)
class MeanTeacherSettings:
    """Mean Teacher (Tarvainen & Valpola 2017): config section "mean_teacher". Each value
    defaults (None) to its ``--baseline_preset`` source's (`PRESETS`)."""

    consistency_weight: Optional[float] = setting(
        None, "w_max, the consistency cost's weight after its ramp. Default: the preset's; "
        "fixmatch_cifar: 50, google-research/fixmatch mean_teacher.py --consistency_weight; "
        "imagenet: 10, CuriousAI/mean-teacher pytorch/experiments/imagenet_valid.py "
        "'consistency'.", flag="mean_teacher_consistency")
    consistency_type: Optional[str] = setting(
        None, "The consistency cost between the student's and the teacher's softmax: mse (sum "
        "of squared differences / C) or kl (KL(teacher || student)). Default: the preset's; "
        "fixmatch_cifar: mse (mean_teacher.py); imagenet: kl (imagenet_valid.py "
        "'consistency_type').", flag="mean_teacher_consistency_type")
    consistency_rampup: Optional[float] = setting(
        None, "The share of the run's steps over which the consistency weight rises to w_max "
        "(0: no ramp). Default: the preset's; fixmatch_cifar: 0.4, linear (mean_teacher.py "
        "--warmup_pos); imagenet: 5/60, sigmoid (imagenet_valid.py 'consistency_rampup' 5 of "
        "its 60 epochs, pytorch/mean_teacher/ramps.py sigmoid_rampup).",
        flag="mean_teacher_consistency_rampup")
    ema_horizon: Optional[float] = setting(
        None, "The teacher's horizon 1/(1 - a) as a share of the run's steps: the decay is "
        "1 - 1/(share x steps), 0 under one step. Default: the preset's source's share; "
        "fixmatch_cifar: 1,000 of 2^20 steps (mean_teacher.py --ema 0.999, train_kimg 2^16 of "
        "64-image batches); imagenet: 3,333 of 345,900 (imagenet_valid.py 'ema_decay' 0.9997 "
        "over 60 epochs of 5,765 steps on its 10 GPUs).", flag="mean_teacher_ema_horizon")
    unlabelled_ratio: Optional[int] = setting(
        None, "Unlabelled images per labelled one in a step: the labelled batch is "
        "global_batch_size // (1 + ratio), the unlabelled one the rest. Default: the preset's, "
        "1 in both: mean_teacher.py's 64 labelled and 64 unlabelled images, "
        "imagenet_valid.py's 20 labelled of 40 a GPU.", flag="mean_teacher_unlabelled_ratio")

    def resolved(self, family: str) -> dict[str, Any]:
        """Every setting's value under ``family``: given ones, else the preset's."""
        return {name: (preset if getattr(self, name) is None else getattr(self, name))
                for name, preset in PRESETS[family].items()}

    def problems(self, context: MethodContext) -> list[str]:
        """What is wrong with these settings in their run's `MethodContext`."""
        values = self.resolved(context.baseline_preset)
        checks = [
            (self.ema_horizon is None or 0 < self.ema_horizon <= 1,
             "{mean_teacher_ema_horizon} must lie in (0, 1]"),
            (values["consistency_type"] in CONSISTENCY_TYPES,
             "{mean_teacher_consistency_type} must be one of " + ", ".join(CONSISTENCY_TYPES)),
            (values["consistency_weight"] >= 0, "{mean_teacher_consistency} cannot be negative"),
            (0 <= values["consistency_rampup"] <= 1,
             "{mean_teacher_consistency_rampup} must lie in [0, 1]"),
            (values["unlabelled_ratio"] >= 1, "{mean_teacher_unlabelled_ratio} must be at least 1"),
            (context.global_batch_size >= 1 + values["unlabelled_ratio"],
             "{global_batch_size} must be at least 1 + {mean_teacher_unlabelled_ratio} (one "
             "labelled image a step)"),
        ]
        return [message for ok, message in checks if not ok]


def consistency_cost(student_logits: FloatTensor, teacher_logits: FloatTensor,
                     consistency_type: str) -> FloatTensor:
    """Per-image consistency cost, float32 [B], from float32 [B, C] logits
    (no gradient reaches the teacher's): ``mse`` = sum_c (p_s - p_t)^2 / C,
    ``kl`` = sum_c p_t (log p_t - log p_s)."""
    teacher_logits = tf.stop_gradient(teacher_logits)
    if consistency_type == "kl":
        teacher_log = tf.nn.log_softmax(teacher_logits)
        return tf.reduce_sum(tf.exp(teacher_log) * (
            teacher_log - tf.nn.log_softmax(student_logits)), axis=1)
    difference = tf.nn.softmax(student_logits) - tf.nn.softmax(teacher_logits)
    return tf.reduce_mean(tf.square(difference), axis=1)


def recipe_of(family: str, global_batch_size: int) -> recipes.Recipe:
    """The `recipes.Recipe` of ``family``'s source."""
    if family == "imagenet":
        return recipes.mt_imagenet(global_batch_size)
    return recipes.cifar_code("mean_teacher.py")


@dataclasses.dataclass(frozen=True)
class MeanTeacherMetrics(StepMetrics):
    """A Mean Teacher step's: the labelled cross-entropy and the consistency (each a mean over
    its family's rows, module docstring), w(t), the weight decay."""

    categorisation: Mean
    consistency: Mean
    consistency_weight: Mean
    weight_decay: Mean


class MeanTeacherMethod(SourceBaseline):
    """Mean Teacher (see the module docstring), with its `MeanTeacherSettings` under
    ``family`` (a ``--baseline_preset`` value).

    ``teacher`` is an `EmbeddingClassifier` of the student's architecture and precision, built
    in ``strategy.scope()``; its weights are set to the student's here. ``total_steps`` (the
    run's) turns the ramp's and the horizon's shares into steps.
    """

    name = "mean_teacher"
    Settings = MeanTeacherSettings
    exported_item = "teacher"
    PHASES = ("mean_teacher",)

    def __init__(self, strategy: tf.distribute.Strategy, model: EmbeddingClassifier,
                 optimizer: keras.optimizers.Optimizer, teacher: EmbeddingClassifier, *,
                 num_classes: int, global_batch_size: int, weight_decay: float,
                 settings: MeanTeacherSettings, total_steps: int,
                 family: str = "fixmatch_cifar", source_optimizer: bool = True,
                 jit_compile: bool = False) -> None:
        super().__init__(strategy, model, optimizer, teacher, num_classes=num_classes,
                         global_batch_size=global_batch_size, weight_decay=weight_decay,
                         recipe=recipe_of(family, global_batch_size), total_steps=total_steps,
                         source_optimizer=source_optimizer, ema_horizon=settings.ema_horizon,
                         jit_compile=jit_compile)
        values = settings.resolved(family)
        self.family = family
        self.teacher = teacher
        self.teacher_updates = self.updates
        self.consistency_weight = float(values["consistency_weight"])
        self.consistency_type = values["consistency_type"]
        self.rampup_steps = float(values["consistency_rampup"]) * total_steps
        self.rampup = {"linear": linear_rampup, "sigmoid": sigmoid_rampup}[RAMP_OF[family]]
        self.labelled_batch_size, self.unlabelled_batch_size = split_batch(
            self.global_batch_size, int(values["unlabelled_ratio"]))

    @classmethod
    def recipe(cls, context):
        return recipe_of(context.baseline_preset, context.global_batch_size)

    @classmethod
    def from_context(cls, context, strategy, model, optimizer, num_classes, split):
        """The method of a run; ``split`` is its `TrainingSplit` (its used examples make the
        run's steps)."""
        teacher = build_twin(context, strategy, num_classes)
        return cls(strategy, model, optimizer, teacher, num_classes=num_classes,
                   global_batch_size=context.global_batch_size,
                   weight_decay=context.weight_decay, settings=context.settings,
                   total_steps=run_steps(context, len(split.used_index)),
                   family=context.baseline_preset,
                   source_optimizer=context.baseline_optimizer == "source",
                   jit_compile=context.jit_compile)

    # ---- the Method interface ------------------------------------------------

    def phase(self, epoch: int) -> str:
        return "mean_teacher"

    def phase_step(self, phase: str) -> PhaseStep:
        forward = self._forward_all_images if self.family == "imagenet" else self._forward
        return PhaseStep(forward, MeanTeacherMetrics, self._finish)

    def input_spec(self, split: TrainingSplit) -> InputSpec:
        labelled_views = UNLABELLED_VIEWS if self.family == "imagenet" else views.ONE_VIEW
        return InputSpec({
            "labelled": Stream(split.labelled_index, self.labelled_batch_size,
                               dict(labelled_views), repeats=True),
            "unlabelled": Stream(split.used_index, self.unlabelled_batch_size,
                                 UNLABELLED_VIEWS)})

    def checkpoint_items(self) -> dict[str, tf.Module | tf.Variable]:
        return {"teacher": self.teacher, "teacher_updates": self.teacher_updates}

    def evaluated_models(self) -> dict[str, EmbeddingClassifier]:
        return {"": self.teacher, "student": self.model}

    def batch_norm_layers(self) -> list[keras.layers.Layer]:
        """The student's batch norms, and on ImageNet the teacher's (its own statistics)."""
        layers = self.model.batch_norm_layers()
        if self.family == "imagenet":
            layers = layers + self.teacher.batch_norm_layers()
        return layers

    # ---- the step ------------------------------------------------------------

    def _logits(self, model, images, update=True):
        return tf.cast(model(images, training=True,
                             update_moving_statistics=update)["logits"], tf.float32)

    def _output(self, categorisation, consistency):
        """The `StepOutput` of the step's two terms (`Mean`s)."""
        weight = self.consistency_weight * self.rampup(self.teacher_updates, self.rampup_steps)
        decay = self.weight_decay_penalty()
        loss = categorisation.value + weight * consistency.value + decay
        return StepOutput(loss, MeanTeacherMetrics(
            categorisation=categorisation, consistency=consistency,
            consistency_weight=replica_value(weight), weight_decay=replica_value(decay)))

    def _forward(self, batch):
        labelled, unlabelled = batch["labelled"], batch["unlabelled"]
        labelled_logits = self._logits(self.model, labelled["image"])
        student_logits = self._logits(self.model, unlabelled["student"], update=False)
        teacher_logits = self._logits(self.teacher, unlabelled["teacher"], update=False)
        return self._output(
            batch_mean(losses.categorisation_loss(labelled_logits,
                                                  tf.cast(labelled["label"], tf.int64))),
            batch_mean(consistency_cost(student_logits, teacher_logits, self.consistency_type)))

    def _forward_all_images(self, batch):
        labelled, unlabelled = batch["labelled"], batch["unlabelled"]
        student_logits = self._logits(self.model, tf.concat(
            [labelled["student"], unlabelled["student"]], axis=0))
        teacher_logits = self._logits(self.teacher, tf.concat(
            [labelled["teacher"], unlabelled["teacher"]], axis=0))
        rows = tf.shape(labelled["student"])[0]
        # Both terms are means over every image, labelled or not.
        images = tf.shape(student_logits)[0]
        return self._output(
            batch_mean(losses.categorisation_loss(student_logits[:rows],
                                                  tf.cast(labelled["label"], tf.int64)), images),
            batch_mean(consistency_cost(student_logits, teacher_logits, self.consistency_type)))

    def _finish(self, batch):
        del batch  # The teacher follows the student's new weights.
        self.average_weights()
