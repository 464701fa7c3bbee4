"""Mean Teacher (Tarvainen & Valpola 2017) as a training method.

Two models of the same architecture: the student, trained by SGD, and the
teacher, whose trainable weights are an exponential moving average of the
student's. One phase, ``"mean_teacher"``. The defaults are the TF release's
single-head CIFAR-10 runs (CuriousAI/mean-teacher,
``tensorflow/experiments/cifar10_final_eval.py`` with
``tensorflow/mean_teacher/model.py``). A step reads one stream of ``G``
images drawn from all used images, as the release's ``'vary'`` batches
(``mean_teacher/minibatching.py``): labelled images appear in proportion
to their share and carry their class, the others -1. Each image comes in
two views, ``"student"`` and ``"teacher"`` (both the run's weak
augmentation, drawn with different seeds). With ``t`` the steps done
before this one and ``T`` the ramp-up steps:

- the student runs in training mode on the student views, the teacher in
  training mode, without gradient, on the teacher views;
- loss = sum over the batch's labelled images of the cross-entropy / G
  + w(t) * sum over all images of the consistency / G + weight decay, where
  the consistency is ``sum_c (p_student - p_teacher)^2 / C`` (``mse``) or
  ``KL(p_teacher || p_student)`` (``kl``), and
  ``w(t) = w_max * exp(-5 (1 - t / T)^2)`` while ``t < T``, ``w_max``
  after (``model.py`` ``sigmoid_rampup``). Both terms are divided by the
  whole batch, as in both MT releases (TF ``model.py``, PyTorch
  ``main.py``): their consistency weights were tuned with that scale.
  ``w_max`` is the setting times the labelled share ``|labelled| / |used|``
  (cifar10_final_eval: ``100.0 * n_labeled / 50000``) unless told not to;
- after the SGD step, teacher <- a * teacher + (1 - a) * student for every
  trainable variable (float32 whatever the compute precision), with the
  step function ``a = decay_during`` while ``t < T``, ``decay_after`` then
  (``model.py`` ``step_rampup``). The release's moving average
  (``framework.py``, ``tf.train.ExponentialMovingAverage(decay)``) has no
  ``num_updates`` ramp and no zero-debias, and starts from the student's
  initial values, as ours does (the PyTorch release's teacher is a draw of
  its own). Its update op runs before the optimiser step (a control
  dependency of the train op), so its teacher averages the weights before
  each step; ours averages those after it (the PyTorch release's order):
  the same average, one student step later.

Batch-norm moving statistics are not averaged: the teacher keeps its own,
updated from its training-mode forward passes on the teacher views with the
model's momentum, as both releases do (the TF release's mean-only batch
norm keeps an ``eval_mean`` variable per tower outside the average; the
PyTorch release's statistics are buffers, not parameters).

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
from llp_tf.data.pipeline.streams import Stream
from llp_tf.models.factory import build_model_from_config
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training.methods.base import Finish, Forward, InputSpec, Method, TrainingSplit
from llp_tf.tensor_types import FloatTensor, IntTensor

#: How the student's softmax is compared with the teacher's.
CONSISTENCY_TYPES = ("mse", "kl")
#: The views of every example: one for each model, both the run's augmentation.
VIEWS = {"student": views.WEAK, "teacher": views.WEAK}


@dataclasses.dataclass(frozen=True)
class MeanTeacherSettings:
    """Mean Teacher (Tarvainen & Valpola 2017): config section "mean_teacher".
    The defaults follow the MT TF release's single-head CIFAR-10 runs
    (``tensorflow/experiments/cifar10_final_eval.py``)."""

    consistency_weight: float = setting(
        100.0, "The consistency cost's weight after its ramp-up, before the labelled-share "
        "scale (mean_teacher_scale_consistency_by_labels): 100 is the MT TF release's "
        "max_consistency_cost (tensorflow/mean_teacher/model.py), which its semi-supervised "
        "CIFAR-10 runs scale to 100.0 * n_labeled / 50000 "
        "(tensorflow/experiments/cifar10_final_eval.py; 8 at 4,000 labels).",
        flag="mean_teacher_consistency")
    scale_consistency_by_labels: bool = setting(
        True, "Multiply mean_teacher_consistency by the run's labelled share, |labelled| / "
        "|used|, as the MT TF release's CIFAR-10 runs do (tensorflow/experiments/"
        "cifar10_final_eval.py: max_consistency_cost = 100.0 * n_labeled / 50000, 50000 "
        "being all its training images; 100 with every image labelled).",
        flag="mean_teacher_scale_consistency_by_labels")
    consistency_type: str = setting(
        "mse", "The consistency cost between the student's and the teacher's softmax: mse "
        "(sum of squared differences / C, the MT paper's choice and both releases' default) "
        "or kl (KL(teacher || student), the PyTorch release's ImageNet run).",
        choices=CONSISTENCY_TYPES, flag="mean_teacher_consistency_type")
    consistency_rampup_steps: int = setting(
        40000, "T, training steps of the sigmoid ramp-up exp(-5 (1 - t/T)^2) of the "
        "consistency weight; its end also switches the teacher's EMA decay from "
        "mean_teacher_ema_decay_during_rampup to mean_teacher_ema_decay_after_rampup. "
        "40000 (of 150000 steps) is the MT TF release's rampup_length "
        "(tensorflow/mean_teacher/model.py, kept by its cifar10_final_eval.py). 0: no ramp.",
        flag="mean_teacher_consistency_rampup_steps")
    ema_decay_during_rampup: float = setting(
        0.999, "The teacher's EMA decay while the consistency ramps up: 0.999 as the MT TF "
        "release's CIFAR-10 runs set it (tensorflow/experiments/cifar10_final_eval.py "
        "ema_decay_during_rampup; its model.py default is 0.99, the MT paper's value during "
        "ramp-up).",
        flag="mean_teacher_ema_decay_during_rampup")
    ema_decay_after_rampup: float = setting(
        0.999, "The teacher's EMA decay after the ramp-up: 0.999, the MT TF release's "
        "ema_decay_after_rampup (tensorflow/mean_teacher/model.py, kept by its "
        "cifar10_final_eval.py) and the MT paper's CIFAR-10/SVHN value after ramp-up.",
        flag="mean_teacher_ema_decay_after_rampup")

    def problems(self, config: Any) -> list[str]:
        """What is wrong with these settings in the whole `TrainConfig` ``config``."""
        del config  # Nothing here depends on the other sections.
        checks = [
            (0 <= self.ema_decay_during_rampup < 1,
             "{mean_teacher_ema_decay_during_rampup} must lie in [0, 1)"),
            (0 <= self.ema_decay_after_rampup < 1,
             "{mean_teacher_ema_decay_after_rampup} must lie in [0, 1)"),
            (self.consistency_weight >= 0, "{mean_teacher_consistency} cannot be negative"),
            (self.consistency_rampup_steps >= 0,
             "{mean_teacher_consistency_rampup_steps} cannot be negative"),
        ]
        return [message for ok, message in checks if not ok]

    def max_consistency_weight(self, split: TrainingSplit) -> float:
        """w_max of a run on ``split``: the setting, times |labelled| / |used|
        when ``scale_consistency_by_labels``."""
        if not self.scale_consistency_by_labels:
            return float(self.consistency_weight)
        return float(self.consistency_weight) * len(split.labelled_index) / len(split.used_index)


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


def ema_decay_at(steps_done: IntTensor, rampup_steps: int, during: float,
                 after: float) -> FloatTensor:
    """The decay of the teacher update of the step after ``steps_done`` steps:
    ``during`` while steps_done < ``rampup_steps``, ``after`` then; float32 []."""
    return tf.where(tf.cast(steps_done, tf.int64) < rampup_steps,
                    tf.constant(during, tf.float32), tf.constant(after, tf.float32))


class MeanTeacherMethod(Method):
    """Mean Teacher (see the module docstring), with its `MeanTeacherSettings`.

    ``teacher`` is an `EmbeddingClassifier` of the student's architecture and precision, built
    in ``strategy.scope()``; its weights are set to the student's here. ``split`` (the run's
    `TrainingSplit`) scales the consistency weight (`max_consistency_weight`).
    """

    name = "mean_teacher"
    Settings = MeanTeacherSettings
    exported_item = "teacher"
    METRICS = {"mean_teacher": ("loss", "categorisation", "consistency", "consistency_weight",
                                "ema_decay", "weight_decay")}

    def __init__(self, strategy: tf.distribute.Strategy, model: EmbeddingClassifier,
                 optimizer: keras.optimizers.Optimizer, teacher: EmbeddingClassifier, *,
                 num_classes: int, global_batch_size: int, weight_decay: float,
                 settings: MeanTeacherSettings, split: TrainingSplit,
                 jit_compile: bool = False) -> None:
        super().__init__(strategy, model, optimizer, num_classes=num_classes,
                         global_batch_size=global_batch_size, weight_decay=weight_decay,
                         jit_compile=jit_compile)
        self.teacher = teacher
        self.consistency_weight = settings.max_consistency_weight(split)
        self.consistency_type = settings.consistency_type
        self.consistency_rampup_steps = int(settings.consistency_rampup_steps)
        self.ema_decay_during_rampup = float(settings.ema_decay_during_rampup)
        self.ema_decay_after_rampup = float(settings.ema_decay_after_rampup)
        with strategy.scope():
            for teacher_weight, weight in zip(teacher.weights, model.weights, strict=True):
                teacher_weight.assign(weight)
            self.teacher_updates = tf.Variable(0, dtype=tf.int64, trainable=False,
                                               name="teacher_updates")

    @classmethod
    def from_config(cls, config, strategy, model, optimizer, num_classes, split):
        """The method of a `TrainConfig`; ``split`` is the run's `TrainingSplit`
        (its labelled share scales the consistency weight)."""
        with strategy.scope():
            teacher = build_model_from_config(config.model, num_classes,
                                              config.data.image_size,
                                              precision=config.run.mixed_precision)
        return cls(strategy, model, optimizer, teacher, num_classes=num_classes,
                   global_batch_size=config.optimization.global_batch_size,
                   weight_decay=config.optimization.weight_decay,
                   settings=config.method_settings, split=split,
                   jit_compile=config.run.jit_compile)

    # ---- the Method interface ------------------------------------------------

    def phase(self, epoch: int) -> str:
        return "mean_teacher"

    def step_parts(self, phase: str) -> tuple[Forward, Finish]:
        return self._forward, self._finish

    def input_spec(self, split: TrainingSplit) -> InputSpec:
        # The release's 'vary' batches: all used images, labelled ones in proportion.
        return InputSpec({"used": Stream(split.used_index, self.global_batch_size, VIEWS)})

    def checkpoint_items(self) -> dict[str, tf.Module | tf.Variable]:
        return {"teacher": self.teacher, "teacher_updates": self.teacher_updates}

    def evaluated_models(self) -> dict[str, EmbeddingClassifier]:
        return {"": self.teacher, "student": self.model}

    def batch_norm_layers(self) -> list[keras.layers.Layer]:
        # The teacher's moving statistics follow its own forward passes.
        return self.model.batch_norm_layers() + self.teacher.batch_norm_layers()

    # ---- the step ------------------------------------------------------------

    def _ema_decay(self) -> FloatTensor:
        """The decay of this step's teacher update (``teacher_updates`` steps done)."""
        return ema_decay_at(self.teacher_updates, self.consistency_rampup_steps,
                            self.ema_decay_during_rampup, self.ema_decay_after_rampup)

    def _forward(self, batch):
        used = batch["used"]
        logits = tf.cast(self.model(used["student"], training=True)["logits"], tf.float32)
        teacher_logits = tf.cast(self.teacher(used["teacher"], training=True)["logits"],
                                 tf.float32)
        # Zero for the images without a class (label -1).
        cross_entropy = losses.categorisation_loss(logits, tf.cast(used["label"], tf.int64))
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
                   "ema_decay": self._ema_decay() / replicas, "weight_decay": decay}
        return loss, metrics, ()

    def _finish(self, batch, update):
        del batch, update  # The teacher follows the student's new weights.
        alpha = self._ema_decay()
        for teacher_weight, weight in zip(self.teacher.trainable_variables,
                                          self.model.trainable_variables, strict=True):
            teacher_weight.assign(alpha * teacher_weight + (1.0 - alpha) * weight)
        self.teacher_updates.assign_add(1)
