"""Pseudo-label (Lee 2013): the current network's argmax as the label of unlabelled examples.

One configuration, whole, in every regime family: the pseudo-label baseline of the FixMatch
codebase (google-research/fixmatch ``pseudo_label.py``, the same under
``--baseline_preset=imagenet``: the code publishes no ImageNet one): weight 1, threshold 0.95,
a linear ramp to 0.4 of the run, equal labelled and unlabelled batches, its optimiser and an
EMA of the trainable weights that is evaluated (`source_baseline.SourceBaseline`).

Each step reads a labelled batch (B examples, their true labels) and an
unlabelled batch (U examples of the used set, labelled ones too; their batch
labels are never read) and passes them through the network in training mode
one after the other: each batch is normalised with its own batch-norm
moments, and the moving statistics follow the labelled pass only, as the
pseudo-label baseline of the FixMatch code (google-research/fixmatch
``pseudo_label.py``: batch-norm updates taken from the first classifier
call) and USB (microsoft/Semi-supervised-learning
``semilearn/algorithms/pseudolabel/pseudolabel.py``: batch norm frozen for
the unlabelled call) do. ``batch_norm="joint"`` passes both in one forward
pass instead (moments and moving statistics of the joint batch). The
unlabelled examples' targets are the argmax classes of their own forward
pass (no gradient through the choice); a confidence threshold keeps only the
examples whose max probability reaches it:

    loss = sum_l CE(l) / B + alpha(t) * sum_u mask_u * CE(u, argmax_u) / U + decay

alpha(t) = alpha_f * min(1, t / (r S)) with t the steps done before this one, S the run's
steps and r the ramp's share (``pseudo_label.py``: ``warmup_pos``, per step). Checkpoint
items: ``average`` (the EMA model, evaluated under the plain validation names and exported)
and ``updates`` (t); the trained weights are evaluated as ``val_trained_top1``, ...
"""

import dataclasses

import keras
import tensorflow as tf

from llp_tf.config_fields import setting
from llp_tf.core import losses
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training.methods import recipes
from llp_tf.training.methods.base import (
    InputSpec, PhaseStep, StepOutput, Stream, TrainingSplit, split_batch)
from llp_tf.training.methods.context import MethodContext
from llp_tf.training.methods.recipes import linear_rampup
from llp_tf.training.methods.source_baseline import SourceBaseline, build_twin, run_steps
from llp_tf.training.step_metrics import Mean, StepMetrics, batch_mean, replica_value

#: How a step's labelled and unlabelled batches pass batch norm (module docstring).
BATCH_NORM_PASSES = ("separate", "joint")


@dataclasses.dataclass(frozen=True)
class PseudoLabelSettings:
    """Pseudo-label (Lee 2013): config section "pseudo_label"."""

    final_weight: float = setting(
        1.0, "alpha_f: the weight of the unlabelled cross-entropy after the ramp: 1, the "
        "FixMatch codebase's pseudo-label baseline (google-research/fixmatch pseudo_label.py "
        "--consistency_weight), in both --baseline_preset families.",
        flag="pseudo_label_final_weight")
    ramp_end: float = setting(
        0.4, "The share of the run's steps over which the weight rises linearly from 0 to "
        "alpha_f: 0.4, pseudo_label.py's --warmup_pos.", flag="pseudo_label_ramp_end")
    threshold: float = setting(
        0.95, "The max probability an unlabelled example's pseudo label needs to count: 0.95, "
        "google-research/fixmatch pseudo_label.py --threshold. 0 keeps all.",
        flag="pseudo_label_threshold")
    unlabelled_ratio: int = setting(
        1, "Unlabelled examples per labelled one in a step: the labelled batch is "
        "global_batch_size // (1 + ratio), the unlabelled one the rest. 1: pseudo_label.py's "
        "equal labelled and unlabelled batches (google-research/fixmatch pseudo_label.py: "
        "64 each).",
        flag="pseudo_label_unlabelled_ratio")
    batch_norm: str = setting(
        "separate", "How the labelled and unlabelled batches pass batch norm. separate: two "
        "training-mode passes, each batch normalised with its own moments, the moving "
        "statistics updated from the labelled pass only, as the FixMatch code's pseudo-label "
        "baseline (google-research/fixmatch pseudo_label.py) and USB "
        "(semilearn/algorithms/pseudolabel/pseudolabel.py). joint: one pass over both "
        "batches, whose moments and moving statistics are those of the joint batch.",
        choices=BATCH_NORM_PASSES, flag="pseudo_label_batch_norm")

    def problems(self, context: MethodContext) -> list[str]:
        """What is wrong with these settings in their run's `MethodContext`."""
        checks = [
            (self.final_weight >= 0, "{pseudo_label_final_weight} cannot be negative"),
            (0 <= self.ramp_end <= 1, "{pseudo_label_ramp_end} must lie in [0, 1]"),
            (0 <= self.threshold <= 1, "{pseudo_label_threshold} must lie in [0, 1]"),
            (self.unlabelled_ratio >= 1, "{pseudo_label_unlabelled_ratio} must be at least 1"),
            (context.global_batch_size >= 1 + self.unlabelled_ratio,
             "{global_batch_size} must be at least 1 + {pseudo_label_unlabelled_ratio} (one "
             "labelled example a step)"),
        ]
        return [message for ok, message in checks if not ok]


@dataclasses.dataclass(frozen=True)
class PseudoLabelMetrics(StepMetrics):
    """A pseudo-label step's: the labelled and the masked unlabelled cross-entropy, alpha(t),
    the share of unlabelled examples kept by the threshold, the weight decay."""

    labelled: Mean
    unlabelled: Mean
    unlabelled_weight: Mean
    mask: Mean
    weight_decay: Mean


class PseudoLabelMethod(SourceBaseline):
    """Pseudo-label training (see the module docstring), with its `PseudoLabelSettings`;
    ``average`` is the evaluated EMA model (`SourceBaseline`), ``total_steps`` the run's."""

    name = "pseudo_label"
    Settings = PseudoLabelSettings
    exported_item = "average"
    PHASES = ("pseudo_label",)

    def __init__(self, strategy: tf.distribute.Strategy, model: EmbeddingClassifier,
                 optimizer: keras.optimizers.Optimizer, average: EmbeddingClassifier, *,
                 num_classes: int, global_batch_size: int, weight_decay: float,
                 settings: PseudoLabelSettings, total_steps: int, source_optimizer: bool = True,
                 jit_compile: bool = False) -> None:
        super().__init__(strategy, model, optimizer, average, num_classes=num_classes,
                         global_batch_size=global_batch_size, weight_decay=weight_decay,
                         recipe=self.recipe(None), total_steps=total_steps,
                         source_optimizer=source_optimizer, jit_compile=jit_compile)
        self.final_weight = float(settings.final_weight)
        self.rampup_steps = float(settings.ramp_end) * total_steps
        self.threshold = float(settings.threshold)
        if settings.batch_norm not in BATCH_NORM_PASSES:
            raise ValueError(f"batch_norm must be one of {BATCH_NORM_PASSES}, "
                             f"not {settings.batch_norm!r}")
        self.batch_norm = settings.batch_norm
        self.labelled_batch_size, self.unlabelled_batch_size = split_batch(
            self.global_batch_size, int(settings.unlabelled_ratio))

    @classmethod
    def recipe(cls, context):
        del context  # pseudo_label.py in both families.
        return recipes.cifar_code("pseudo_label.py")

    @classmethod
    def from_context(cls, context, strategy, model, optimizer, num_classes, split):
        """The method of a run; ``split`` is its `TrainingSplit`."""
        return cls(strategy, model, optimizer, build_twin(context, strategy, num_classes),
                   num_classes=num_classes, global_batch_size=context.global_batch_size,
                   weight_decay=context.weight_decay, settings=context.settings,
                   total_steps=run_steps(context, len(split.used_index)),
                   source_optimizer=context.baseline_optimizer == "source",
                   jit_compile=context.jit_compile)

    def phase(self, epoch: int) -> str:
        return "pseudo_label"

    def phase_step(self, phase: str) -> PhaseStep:
        return PhaseStep(self._forward, PseudoLabelMetrics, self._finish)

    def input_spec(self, split: TrainingSplit) -> InputSpec:
        return InputSpec({
            "labelled": Stream(split.labelled_index, self.labelled_batch_size, repeats=True),
            "unlabelled": Stream(split.used_index, self.unlabelled_batch_size)})

    def checkpoint_items(self) -> dict[str, tf.Module | tf.Variable]:
        return {"average": self.average, "updates": self.updates}

    def evaluated_models(self) -> dict[str, EmbeddingClassifier]:
        return {"": self.average, "trained": self.model}

    def _forward(self, batch):
        labelled, unlabelled = batch["labelled"], batch["unlabelled"]
        labelled_logits, unlabelled_logits = self._logits(labelled["image"],
                                                          unlabelled["image"])
        labelled_term, unlabelled_term, mask = (batch_mean(term) for term in (
            losses.pseudo_label_terms(labelled_logits, tf.cast(labelled["label"], tf.int64),
                                      unlabelled_logits, unlabelled_logits, self.threshold)))
        weight = self.final_weight * linear_rampup(self.updates, self.rampup_steps)
        decay = self.weight_decay_penalty()
        loss = labelled_term.value + weight * unlabelled_term.value + decay
        return StepOutput(loss, PseudoLabelMetrics(
            labelled=labelled_term, unlabelled=unlabelled_term,
            unlabelled_weight=replica_value(weight), mask=mask,
            weight_decay=replica_value(decay)))

    def _finish(self, batch):
        del batch  # The average follows the new weights.
        self.average_weights()

    def _logits(self, labelled_images, unlabelled_images):
        """Training-mode logits, float32 [B, C] and [U, C] (module docstring)."""
        if self.batch_norm == "joint":
            return self.joint_logits([labelled_images, unlabelled_images])
        return [tf.cast(self.model(images, training=True,
                                   update_moving_statistics=update)["logits"], tf.float32)
                for images, update in ((labelled_images, True), (unlabelled_images, False))]
