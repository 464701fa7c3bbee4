"""Mean Teacher (Tarvainen & Valpola 2017) as a training method, in the single-head SGD form.

Two models of the same architecture: the student, trained by SGD, and the
teacher, an exponential moving average of the student. One phase,
``"mean_teacher"``. The loss, batch make-up, ramp and batch-norm handling are
those of the Mean Teacher of the FixMatch codebase (google-research/fixmatch
``mean_teacher.py``), a single-head SGD configuration; the teacher's decay is
the MT releases' 0.99, its horizon kept within a share of the run
(`MeanTeacherSettings`). A step reads a labelled batch (B images, their
classes, one weak view) and an unlabelled batch (U images of the used set,
labelled ones too; their labels are never read), each unlabelled image in two
weak views, ``"student"`` and ``"teacher"``. With ``t`` the steps done before
this one, ``S`` the run's steps and ``r`` the ramp's share of them:

- the student runs in training mode on the labelled images (whose batch-norm
  moments update its moving statistics) and on the unlabelled student views
  (its own moments, statistics kept), the teacher in training mode, without
  gradient and statistics kept, on the teacher views;
- loss = sum over the labelled batch of the cross-entropy / B
  + w(t) * sum over the unlabelled batch of the consistency / U + weight decay,
  where the consistency is ``sum_c (p_student - p_teacher)^2 / C`` (``mse``) or
  ``KL(p_teacher || p_student)`` (``kl``), and ``w(t) = w_max * min(1, t / (r S))``;
- after the SGD step, teacher <- a * teacher + (1 - a) * student for every
  weight, the batch-norm moving statistics included (``mean_teacher.py``
  averages ``utils.model_vars()``, which holds them), float32 whatever the
  compute precision. The average starts from the student's initial weights,
  without zero-debias.

Checkpoint items: ``teacher`` (the model) and ``teacher_updates`` (t).
Evaluation reports the teacher under the plain validation names
(``val_top1``) and the student with its name after the prefix
(``val_student_top1``); export, predict, the linear probe and the analysis
read the teacher (`exported_item`).
"""

import dataclasses
from typing import Any

import keras
import tensorflow as tf

from llp_tf.config_fields import setting
from llp_tf.core import losses
from llp_tf.data.augmentation import views
from llp_tf.data.pipeline.input_fns import steps_per_epoch
from llp_tf.data.pipeline.streams import Stream
from llp_tf.models.factory import build_model_from_config
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training.methods.base import (
    Finish, Forward, InputSpec, Method, TrainingSplit, split_batch)
from llp_tf.tensor_types import FloatTensor

#: How the student's softmax is compared with the teacher's.
CONSISTENCY_TYPES = ("mse", "kl")
#: The views of every unlabelled example: one for each model, both the run's augmentation.
UNLABELLED_VIEWS = {"student": views.WEAK, "teacher": views.WEAK}


@dataclasses.dataclass(frozen=True)
class MeanTeacherSettings:
    """Mean Teacher (Tarvainen & Valpola 2017): config section "mean_teacher". The loss, batch
    and ramp follow the FixMatch codebase's ``mean_teacher.py``; the decay the MT releases'."""

    consistency_weight: float = setting(
        50.0, "w_max, the consistency cost's weight after its ramp: 50, the FixMatch "
        "codebase's Mean Teacher (google-research/fixmatch mean_teacher.py "
        "--consistency_weight), whose loss this is (cross-entropy averaged over the labelled "
        "batch, consistency over the unlabelled one).", flag="mean_teacher_consistency")
    consistency_type: str = setting(
        "mse", "The consistency cost between the student's and the teacher's softmax: mse "
        "(sum of squared differences / C, mean_teacher.py's and both MT releases' choice) "
        "or kl (KL(teacher || student), the MT PyTorch release's ImageNet run).",
        choices=CONSISTENCY_TYPES, flag="mean_teacher_consistency_type")
    consistency_rampup: float = setting(
        0.4, "The share of the run's steps over which the consistency weight rises linearly "
        "from 0 to w_max: 0.4, mean_teacher.py's --warmup_pos. 0: no ramp.",
        flag="mean_teacher_consistency_rampup")
    ema_decay: float = setting(
        0.99, "a, the teacher's EMA decay: 0.99, the MT TF release's default "
        "(CuriousAI/mean-teacher tensorflow/mean_teacher/model.py ema_decay_during_rampup) "
        "and the MT PyTorch release's 4,000-label CIFAR-10 value "
        "(pytorch/experiments/cifar10_test.py; 0.97 at 1,000 labels). Its horizon 1/(1 - a) "
        "is 100 steps: 8% of the demo's 1,240, 0.003% of r18_p10_q100's. Lowered for a run "
        "shorter than mean_teacher_max_ema_horizon allows.",
        flag="mean_teacher_ema_decay")
    max_ema_horizon: float = setting(
        0.1, "The largest share of the run's steps the teacher may average over: when "
        "1/(1 - mean_teacher_ema_decay) exceeds it, the decay used is 1 - 1/(share x steps) "
        "(0 when that is under one step), so the teacher of a short run does not keep its "
        "random start. The releases' horizons are 0.04-0.67% of their runs "
        "(mean_teacher.py: 0.999 over 2^20 steps, 0.1%).",
        flag="mean_teacher_max_ema_horizon")
    unlabelled_ratio: int = setting(
        1, "Unlabelled images per labelled one in a step: the labelled batch is "
        "global_batch_size // (1 + ratio), the unlabelled one the rest. 1: mean_teacher.py's "
        "64 labelled and 64 unlabelled images a step.", flag="mean_teacher_unlabelled_ratio")

    def problems(self, config: Any) -> list[str]:
        """What is wrong with these settings in the whole `TrainConfig` ``config``."""
        checks = [
            (0 <= self.ema_decay < 1, "{mean_teacher_ema_decay} must lie in [0, 1)"),
            (0 < self.max_ema_horizon <= 1, "{mean_teacher_max_ema_horizon} must lie in (0, 1]"),
            (self.consistency_weight >= 0, "{mean_teacher_consistency} cannot be negative"),
            (0 <= self.consistency_rampup <= 1,
             "{mean_teacher_consistency_rampup} must lie in [0, 1]"),
            (self.unlabelled_ratio >= 1, "{mean_teacher_unlabelled_ratio} must be at least 1"),
            (config.optimization.global_batch_size >= 1 + self.unlabelled_ratio,
             "{global_batch_size} must be at least 1 + {mean_teacher_unlabelled_ratio} (one "
             "labelled image a step)"),
        ]
        return [message for ok, message in checks if not ok]


def teacher_decay(decay: float, max_horizon: float, total_steps: int) -> float:
    """The decay a run of ``total_steps`` uses: ``decay``, or 1 - 1/(``max_horizon`` x steps)
    when that is lower (its horizon 1/(1 - a) the share's steps), 0 below one step."""
    steps = max_horizon * total_steps
    return float(min(decay, max(0.0, 1.0 - 1.0 / steps))) if steps > 0 else 0.0


def linear_rampup(steps_done: FloatTensor, rampup_steps: float) -> FloatTensor:
    """min(1, t / T) for t = ``steps_done`` (float32 []); 1 when T is 0."""
    if rampup_steps <= 0:
        return tf.constant(1.0, tf.float32)
    return tf.cast(tf.clip_by_value(tf.cast(steps_done, tf.float64) / float(rampup_steps),
                                    0.0, 1.0), tf.float32)


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


class MeanTeacherMethod(Method):
    """Mean Teacher (see the module docstring), with its `MeanTeacherSettings`.

    ``teacher`` is an `EmbeddingClassifier` of the student's architecture and precision, built
    in ``strategy.scope()``; its weights are set to the student's here. ``total_steps`` (the
    run's) turns the ramp's share into steps and bounds the teacher's horizon.
    """

    name = "mean_teacher"
    Settings = MeanTeacherSettings
    exported_item = "teacher"
    METRICS = {"mean_teacher": ("loss", "categorisation", "consistency", "consistency_weight",
                                "weight_decay")}

    def __init__(self, strategy: tf.distribute.Strategy, model: EmbeddingClassifier,
                 optimizer: keras.optimizers.Optimizer, teacher: EmbeddingClassifier, *,
                 num_classes: int, global_batch_size: int, weight_decay: float,
                 settings: MeanTeacherSettings, total_steps: int,
                 jit_compile: bool = False) -> None:
        super().__init__(strategy, model, optimizer, num_classes=num_classes,
                         global_batch_size=global_batch_size, weight_decay=weight_decay,
                         jit_compile=jit_compile)
        self.teacher = teacher
        self.consistency_weight = float(settings.consistency_weight)
        self.consistency_type = settings.consistency_type
        self.rampup_steps = float(settings.consistency_rampup) * total_steps
        self.ema_decay = teacher_decay(settings.ema_decay, settings.max_ema_horizon,
                                       total_steps)
        self.labelled_batch_size, self.unlabelled_batch_size = split_batch(
            self.global_batch_size, int(settings.unlabelled_ratio))
        with strategy.scope():
            for teacher_weight, weight in zip(teacher.weights, model.weights, strict=True):
                teacher_weight.assign(weight)
            self.teacher_updates = tf.Variable(0, dtype=tf.int64, trainable=False,
                                               name="teacher_updates")

    @classmethod
    def from_config(cls, config, strategy, model, optimizer, num_classes, split):
        """The method of a `TrainConfig`; ``split`` is the run's `TrainingSplit` (its used
        examples make the run's steps)."""
        optimization = config.optimization
        with strategy.scope():
            teacher = build_model_from_config(config.model, num_classes,
                                              config.data.image_size,
                                              precision=config.run.mixed_precision)
        total_steps = optimization.epochs * steps_per_epoch(len(split.used_index),
                                                            optimization.global_batch_size)
        return cls(strategy, model, optimizer, teacher, num_classes=num_classes,
                   global_batch_size=optimization.global_batch_size,
                   weight_decay=optimization.weight_decay, settings=config.method_settings,
                   total_steps=total_steps, jit_compile=config.run.jit_compile)

    # ---- the Method interface ------------------------------------------------

    def phase(self, epoch: int) -> str:
        return "mean_teacher"

    def step_parts(self, phase: str) -> tuple[Forward, Finish]:
        return self._forward, self._finish

    def input_spec(self, split: TrainingSplit) -> InputSpec:
        return InputSpec({
            "labelled": Stream(split.labelled_index, self.labelled_batch_size, repeats=True),
            "unlabelled": Stream(split.used_index, self.unlabelled_batch_size,
                                 UNLABELLED_VIEWS)})

    def checkpoint_items(self) -> dict[str, tf.Module | tf.Variable]:
        return {"teacher": self.teacher, "teacher_updates": self.teacher_updates}

    def evaluated_models(self) -> dict[str, EmbeddingClassifier]:
        return {"": self.teacher, "student": self.model}

    # ---- the step ------------------------------------------------------------

    def _forward(self, batch):
        labelled, unlabelled = batch["labelled"], batch["unlabelled"]
        labelled_logits = tf.cast(self.model(labelled["image"], training=True)["logits"],
                                  tf.float32)
        student_logits = tf.cast(self.model(unlabelled["student"], training=True,
                                            update_moving_statistics=False)["logits"],
                                 tf.float32)
        teacher_logits = tf.cast(self.teacher(unlabelled["teacher"], training=True,
                                              update_moving_statistics=False)["logits"],
                                 tf.float32)
        categorisation = tf.reduce_sum(losses.categorisation_loss(
            labelled_logits, tf.cast(labelled["label"], tf.int64))) / self.labelled_batch_size
        consistency = tf.reduce_sum(consistency_cost(
            student_logits, teacher_logits, self.consistency_type)) / self.unlabelled_batch_size
        weight = self.consistency_weight * linear_rampup(self.teacher_updates,
                                                         self.rampup_steps)
        decay = self.weight_decay_share()
        loss = categorisation + weight * consistency + decay
        return loss, {"loss": loss, "categorisation": categorisation,
                      "consistency": consistency,
                      "consistency_weight": weight / self.strategy.num_replicas_in_sync,
                      "weight_decay": decay}, ()

    def _finish(self, batch, update):
        del batch, update  # The teacher follows the student's new weights.
        alpha = tf.constant(self.ema_decay, tf.float32)
        for teacher_weight, weight in zip(self.teacher.weights, self.model.weights,
                                          strict=True):
            teacher_weight.assign(alpha * teacher_weight + (1.0 - alpha) * weight)
        self.teacher_updates.assign_add(1)
