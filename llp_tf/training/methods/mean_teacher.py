"""Mean Teacher (Tarvainen & Valpola 2017) as a training method.

Two models of the same architecture: the student, trained by SGD, and the
teacher, whose trainable weights are an exponential moving average of the
student's. One phase, ``"mean_teacher"``. A step reads two streams, the
labelled set (``B`` per step, passes running into each other) and the used
set (``G - B``), each example in two views, ``"student"`` and ``"teacher"``
(both the run's weak augmentation, drawn with different seeds):

- the student runs in training mode on the student views of all ``G``
  images (labelled first), the teacher in training mode, without gradient,
  on their teacher views;
- loss = sum over the labelled images of the cross-entropy / G
  + w(t) * sum over all images of the consistency / G + weight decay, where
  the consistency is ``sum_c (p_student - p_teacher)^2 / C`` (``mse``) or
  ``KL(p_teacher || p_student)`` (``kl``), and
  ``w(t) = w_max * exp(-5 (1 - t / T)^2)`` for the ``t`` steps done before
  this one and T ramp-up steps (w_max after). Both terms are divided by the
  whole batch as in both MT releases (PyTorch ``main.py``, TF ``model.py``),
  not the cross-entropy by the labelled count: the consistency weights
  they published were tuned with that scale;
- after the SGD step, with t now counting it, alpha = min(1 - 1/(t + 1),
  decay) (the PyTorch release's ramp: a true average while it is shorter)
  and teacher <- alpha * teacher + (1 - alpha) * student, for every
  trainable variable (float32 whatever the compute precision).

Batch-norm moving statistics are not averaged: the teacher keeps its own,
updated from its training-mode forward passes on the teacher views with the
model's momentum, as in the PyTorch release (where they are buffers, not
parameters, and the teacher runs in train mode). The teacher starts as a
copy of the student, as the TF release's moving averages do (the PyTorch
release starts it from its own random draw).

Checkpoint items: ``teacher`` (the model) and ``teacher_updates`` (t).
Evaluation reports the teacher under the plain metric names and the
student's with the prefix ``student_``; export, predict, the linear probe
and the analysis read the teacher (`exported_item`).
"""

import dataclasses
from typing import Any

import keras
import tensorflow as tf

from llp_tf.config_fields import setting
from llp_tf.core import losses
from llp_tf.data import pipeline, views
from llp_tf.data.streams import Stream
from llp_tf.models.factory import build_model_from_config
from llp_tf.models.llp_model import LLPModel
from llp_tf.training.methods.base import Finish, Forward, InputSpec, Method, TrainingSplit
from llp_tf.types import FloatTensor

#: How the student's softmax is compared with the teacher's.
CONSISTENCY_TYPES = ("mse", "kl")
#: The views of every example: one for each model, both the run's augmentation.
VIEWS = {"student": views.WEAK, "teacher": views.WEAK}


@dataclasses.dataclass(frozen=True)
class MeanTeacherSettings:
    """Mean Teacher (Tarvainen & Valpola 2017): config section "mean_teacher"."""

    ema_decay: float = setting(
        0.999, "Teacher EMA decay after its ramp alpha_t = min(1 - 1/(t+1), decay) (t = SGD "
        "steps taken): 0.999 is the MT paper's CIFAR-10/SVHN value after ramp-up and the "
        "default of its PyTorch release (its ImageNet run used 0.9997).",
        flag="mean_teacher_ema_decay")
    consistency_weight: float = setting(
        100.0, "w_max, the consistency cost's weight after its ramp-up: 100 with mse is the MT "
        "PyTorch release's CIFAR-10 value and the TF release's default (its semi-supervised "
        "CIFAR-10 runs use 100 x labels / 50,000, SVHN 1; the PyTorch ImageNet run 10 with "
        "kl).",
        flag="mean_teacher_consistency")
    consistency_type: str = setting(
        "mse", "The consistency cost between the student's and the teacher's softmax: mse "
        "(sum of squared differences / C, the MT paper's choice and both releases' default) "
        "or kl (KL(teacher || student), the PyTorch release's ImageNet run).",
        choices=CONSISTENCY_TYPES, flag="mean_teacher_consistency_type")
    consistency_rampup_epochs: float = setting(
        5.0, "Epochs of the sigmoid ramp-up exp(-5 (1 - t/T)^2) of the consistency weight, "
        "stepped per training step: 5 is the PyTorch release's CIFAR-10 and ImageNet value "
        "(its code default is 30; the paper's TF runs ramp over 40,000 steps). 0: no ramp.",
        flag="mean_teacher_consistency_rampup")
    labelled_fraction: float = setting(
        0.5, "Share of each global batch drawn from the labelled set, the rest from all used "
        "images: 0.5 is the PyTorch release's ImageNet run (20 labelled of 40 per GPU; its "
        "CIFAR-10 run used 31 of 128). Rounded to a whole number of images.",
        flag="mean_teacher_labelled_fraction")

    def problems(self, config: Any) -> list[str]:
        """What is wrong with these settings in the whole `TrainConfig` ``config``."""
        batch = config.optimization.global_batch_size
        labelled = labelled_batch_size(self.labelled_fraction, batch)
        checks = [
            (0 <= self.ema_decay < 1, "mean_teacher_ema_decay must lie in [0, 1)"),
            (self.consistency_weight >= 0, "mean_teacher_consistency cannot be negative"),
            (self.consistency_rampup_epochs >= 0,
             "mean_teacher_consistency_rampup cannot be negative"),
            (0 < labelled < batch,
             f"mean_teacher_labelled_fraction={self.labelled_fraction} of "
             f"--global_batch_size={batch} gives {labelled} labelled images per step; it must "
             "leave at least one labelled and one other image"),
        ]
        return [message for ok, message in checks if not ok]


def labelled_batch_size(labelled_fraction: float, global_batch_size: int) -> int:
    """B, the labelled images of a global batch of ``global_batch_size``."""
    return int(round(labelled_fraction * global_batch_size))


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


def sigmoid_rampup(steps_done: FloatTensor, rampup_steps: int) -> FloatTensor:
    """exp(-5 (1 - t/T)^2) for t = ``steps_done`` clipped to [0, T]; 1 when T is 0."""
    if rampup_steps <= 0:
        return tf.constant(1.0, tf.float32)
    phase = 1.0 - tf.clip_by_value(tf.cast(steps_done, tf.float64), 0.0,
                                   float(rampup_steps)) / float(rampup_steps)
    return tf.cast(tf.exp(-5.0 * phase * phase), tf.float32)


def ema_decay_at(update: FloatTensor, ema_decay: float) -> FloatTensor:
    """alpha of the ``update``-th (1-based) teacher update: min(1 - 1/(t+1), decay), float32."""
    t = tf.cast(update, tf.float64)
    return tf.cast(tf.minimum(1.0 - 1.0 / (t + 1.0), ema_decay), tf.float32)


class MeanTeacherMethod(Method):
    """Mean Teacher (see the module docstring).

    Args (besides `Method`'s):
      teacher: `LLPModel` of the student's architecture and precision, built
        in ``strategy.scope()``; its weights are set to the student's here.
      labelled_batch_size: int, B, labelled images per global batch.
      ema_decay: float, the teacher's decay after its ramp.
      consistency_weight: float, w_max.
      consistency_type: one of `CONSISTENCY_TYPES`.
      consistency_rampup_steps: int, T of the consistency ramp-up, in steps.
    """

    name = "mean_teacher"
    Settings = MeanTeacherSettings
    exported_item = "teacher"
    METRICS = {"mean_teacher": ("loss", "categorisation", "consistency", "consistency_weight",
                                "ema_decay", "weight_decay")}

    def __init__(self, strategy: tf.distribute.Strategy, model: LLPModel,
                 optimizer: keras.optimizers.Optimizer, teacher: LLPModel, *,
                 num_classes: int, global_batch_size: int, weight_decay: float,
                 labelled_batch_size: int, ema_decay: float, consistency_weight: float,
                 consistency_type: str, consistency_rampup_steps: int,
                 jit_compile: bool = False) -> None:
        super().__init__(strategy, model, optimizer, num_classes=num_classes,
                         global_batch_size=global_batch_size, weight_decay=weight_decay,
                         jit_compile=jit_compile)
        self.teacher = teacher
        self.labelled_batch_size = int(labelled_batch_size)
        self.ema_decay = float(ema_decay)
        self.consistency_weight = float(consistency_weight)
        self.consistency_type = consistency_type
        self.consistency_rampup_steps = int(consistency_rampup_steps)
        with strategy.scope():
            for teacher_weight, weight in zip(teacher.weights, model.weights, strict=True):
                teacher_weight.assign(weight)
            self.teacher_updates = tf.Variable(0, dtype=tf.int64, trainable=False,
                                               name="teacher_updates")

    @classmethod
    def from_config(cls, config, strategy, model, optimizer, num_classes, split):
        """The method of a `TrainConfig`; ``split`` is the run's `TrainingSplit`."""
        settings = config.method_settings
        batch = config.optimization.global_batch_size
        steps_per_epoch = pipeline.steps_per_epoch(len(split.used_index), batch)
        with strategy.scope():
            teacher = build_model_from_config(config.model, num_classes,
                                              config.data.image_size,
                                              precision=config.run.mixed_precision)
        return cls(strategy, model, optimizer, teacher, num_classes=num_classes,
                   global_batch_size=batch, weight_decay=config.optimization.weight_decay,
                   labelled_batch_size=labelled_batch_size(settings.labelled_fraction, batch),
                   ema_decay=settings.ema_decay,
                   consistency_weight=settings.consistency_weight,
                   consistency_type=settings.consistency_type,
                   consistency_rampup_steps=int(round(
                       settings.consistency_rampup_epochs * steps_per_epoch)),
                   jit_compile=config.run.jit_compile)

    # ---- the Method interface ------------------------------------------------

    def phase(self, epoch: int) -> str:
        return "mean_teacher"

    def step_parts(self, phase: str) -> tuple[Forward, Finish]:
        return self._forward, self._finish

    def input_spec(self, split: TrainingSplit) -> InputSpec:
        return InputSpec({
            "labelled": Stream(split.labelled_index, self.labelled_batch_size, VIEWS,
                               repeats=True),
            "unlabelled": Stream(split.used_index,
                                 self.global_batch_size - self.labelled_batch_size, VIEWS)})

    def checkpoint_items(self) -> dict[str, tf.Module | tf.Variable]:
        return {"teacher": self.teacher, "teacher_updates": self.teacher_updates}

    def evaluated_models(self) -> dict[str, LLPModel]:
        return {"": self.teacher, "student": self.model}

    def batch_norm_layers(self) -> list[keras.layers.Layer]:
        # The teacher's moving statistics follow its own forward passes.
        return self.model.batch_norm_layers() + self.teacher.batch_norm_layers()

    # ---- the step ------------------------------------------------------------

    def _forward(self, batch):
        labelled, unlabelled = batch["labelled"], batch["unlabelled"]
        num_labelled = tf.shape(labelled["label"])[0]
        logits = tf.cast(self.model(tf.concat(
            [labelled["student"], unlabelled["student"]], 0), training=True)["logits"],
            tf.float32)
        teacher_logits = tf.cast(self.teacher(tf.concat(
            [labelled["teacher"], unlabelled["teacher"]], 0), training=True)["logits"],
            tf.float32)
        cross_entropy = losses.categorisation_loss(
            logits[:num_labelled], tf.cast(labelled["label"], tf.int64))
        categorisation = tf.reduce_sum(cross_entropy) / self.global_batch_size
        consistency = tf.reduce_sum(consistency_cost(
            logits, teacher_logits, self.consistency_type)) / self.global_batch_size
        weight = self.consistency_weight * sigmoid_rampup(
            self.teacher_updates, self.consistency_rampup_steps)
        decay = self.weight_decay_share()
        loss = categorisation + weight * consistency + decay
        replicas = self.strategy.num_replicas_in_sync
        metrics = {"loss": loss, "categorisation": categorisation, "consistency": consistency,
                   "consistency_weight": weight / replicas,
                   "ema_decay": ema_decay_at(self.teacher_updates + 1, self.ema_decay)
                   / replicas,
                   "weight_decay": decay}
        return loss, metrics, ()

    def _finish(self, batch, update):
        del batch, update  # The teacher follows the student's new weights.
        self.teacher_updates.assign_add(1)
        alpha = ema_decay_at(self.teacher_updates, self.ema_decay)
        for teacher_weight, weight in zip(self.teacher.trainable_variables,
                                          self.model.trainable_variables, strict=True):
            teacher_weight.assign(alpha * teacher_weight + (1.0 - alpha) * weight)
