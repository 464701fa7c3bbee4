"""FixMatch (Sohn et al. 2020): a weak view's confident argmax trains the strong view.

Whole from one source per ``--baseline_preset`` family (`FixMatchSettings`): ``fixmatch_cifar``
follows google-research/fixmatch ``fixmatch.py`` (tau 0.95, mu 7, lambda_u 1) and
``imagenet`` its ``imagenet/fixmatch.py`` (tau 0.7, mu 5, lambda_u 10); each file's
optimiser, schedule, weight decay and EMA come with it (`recipes`, `SourceBaseline`).

Each step reads a labelled batch (B examples, weakly augmented, their true
labels) and an unlabelled batch (U = mu B examples of the used set, labelled
ones too; their batch labels are never read), each unlabelled example as a
weak and a strong view (RandAugment and Cutout, `llp_tf.data.augmentation.rand_augment`).
All three go through the network in one forward pass (one set of batch-norm
moments, as FixMatch's code). The weak view's softmax gives the pseudo label
(its argmax, no gradient) and the mask (its max >= tau); the strong view is
trained on it:

    loss = sum_l CE(l) / B + lambda_u * sum_u mask_u * CE(strong_u, argmax weak_u) / U
           + decay

Checkpoint items: ``average`` (the EMA model the source evaluates: evaluated under the plain
validation names and exported) and ``updates`` (steps done); the trained weights are
evaluated as ``val_trained_top1``, ....
"""

import dataclasses
from typing import Any, Optional

import keras
import tensorflow as tf

from llp_tf.config_fields import setting
from llp_tf.core import losses
from llp_tf.data.augmentation.views import STRONG, WEAK
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training.methods import recipes
from llp_tf.training.methods.base import (
    InputSpec, PhaseStep, StepOutput, Stream, TrainingSplit, split_batch)
from llp_tf.training.methods.context import MethodContext
from llp_tf.training.methods.source_baseline import SourceBaseline, build_twin, run_steps
from llp_tf.training.step_metrics import Mean, StepMetrics, batch_mean, replica_value

#: Each family's values, by setting (docs/methods.md names each one's source).
PRESETS = {"fixmatch_cifar": dict(threshold=0.95, unlabelled_ratio=7, unlabelled_weight=1.0),
           "imagenet": dict(threshold=0.7, unlabelled_ratio=5, unlabelled_weight=10.0)}


@dataclasses.dataclass(frozen=True)
class FixMatchSettings:
    """FixMatch (Sohn et al. 2020): config section "fixmatch". Each value defaults (None) to
    its ``--baseline_preset`` source's (`PRESETS`)."""

    threshold: Optional[float] = setting(
        None, "tau: the max probability of the weak view a pseudo label needs. Default: the "
        "preset's; fixmatch_cifar: 0.95 (google-research/fixmatch fixmatch.py --confidence, "
        "the paper's CIFAR/SVHN/STL runs); imagenet: 0.7 (imagenet/fixmatch.py "
        "fixmatch.confidence).", flag="fixmatch_threshold")
    unlabelled_ratio: Optional[int] = setting(
        None, "mu: unlabelled examples per labelled one in a step; the labelled batch is "
        "global_batch_size // (1 + mu), the unlabelled one the rest. Default: the preset's; "
        "fixmatch_cifar: 7 (fixmatch.py --uratio); imagenet: 5 (imagenet/fixmatch.py uratio).",
        flag="fixmatch_mu")
    unlabelled_weight: Optional[float] = setting(
        None, "lambda_u: the weight of the masked cross-entropy of the strong views. Default: "
        "the preset's; fixmatch_cifar: 1 (fixmatch.py --wu); imagenet: 10 "
        "(imagenet/fixmatch.py fixmatch.wu).", flag="fixmatch_lambda_u")

    def resolved(self, family: str) -> dict[str, Any]:
        """Every setting's value under ``family``: given ones, else the preset's."""
        return {name: (preset if getattr(self, name) is None else getattr(self, name))
                for name, preset in PRESETS[family].items()}

    def problems(self, context: MethodContext) -> list[str]:
        """What is wrong with these settings in their run's `MethodContext`."""
        values = self.resolved(context.baseline_preset)
        checks = [
            (0 <= values["threshold"] <= 1, "{fixmatch_threshold} must lie in [0, 1]"),
            (values["unlabelled_ratio"] >= 1, "{fixmatch_mu} must be at least 1"),
            (values["unlabelled_weight"] >= 0, "{fixmatch_lambda_u} cannot be negative"),
            (context.global_batch_size >= 1 + values["unlabelled_ratio"],
             f"{{global_batch_size}} must be at least 1 + mu = "
             f"{1 + values['unlabelled_ratio']} ({{fixmatch_mu}}; one labelled example a "
             "step)"),
        ]
        return [message for ok, message in checks if not ok]


def recipe_of(family: str, labelled_batch_size: int) -> recipes.Recipe:
    """The `recipes.Recipe` of ``family``'s source."""
    if family == "imagenet":
        return recipes.fixmatch_imagenet(labelled_batch_size)
    return recipes.cifar_code("fixmatch.py")


@dataclasses.dataclass(frozen=True)
class FixMatchMetrics(StepMetrics):
    """A FixMatch step's: the labelled and the masked strong-view cross-entropy, the share of
    unlabelled examples kept by tau, the weight decay."""

    labelled: Mean
    unlabelled: Mean
    mask: Mean
    weight_decay: Mean


class FixMatchMethod(SourceBaseline):
    """FixMatch training (see the module docstring), with its `FixMatchSettings` under
    ``family``; ``average`` is the evaluated EMA model, ``total_steps`` the run's."""

    name = "fixmatch"
    Settings = FixMatchSettings
    exported_item = "average"
    PHASES = ("fixmatch",)

    def __init__(self, strategy: tf.distribute.Strategy, model: EmbeddingClassifier,
                 optimizer: keras.optimizers.Optimizer, average: EmbeddingClassifier, *,
                 num_classes: int, global_batch_size: int, weight_decay: float,
                 settings: FixMatchSettings, total_steps: int, family: str = "fixmatch_cifar",
                 source_optimizer: bool = True, jit_compile: bool = False) -> None:
        values = settings.resolved(family)
        labelled, unlabelled = split_batch(int(global_batch_size),
                                           int(values["unlabelled_ratio"]))
        super().__init__(strategy, model, optimizer, average, num_classes=num_classes,
                         global_batch_size=global_batch_size, weight_decay=weight_decay,
                         recipe=recipe_of(family, labelled), total_steps=total_steps,
                         source_optimizer=source_optimizer, jit_compile=jit_compile)
        self.threshold = float(values["threshold"])
        self.unlabelled_weight = float(values["unlabelled_weight"])
        self.labelled_batch_size, self.unlabelled_batch_size = labelled, unlabelled

    @classmethod
    def recipe(cls, context):
        family = context.baseline_preset
        labelled, _ = split_batch(context.global_batch_size,
                                  int(context.settings.resolved(family)["unlabelled_ratio"]))
        return recipe_of(family, labelled)

    @classmethod
    def from_context(cls, context, strategy, model, optimizer, num_classes, split):
        """The method of a run; ``split`` is its `TrainingSplit`."""
        return cls(strategy, model, optimizer, build_twin(context, strategy, num_classes),
                   num_classes=num_classes, global_batch_size=context.global_batch_size,
                   weight_decay=context.weight_decay, settings=context.settings,
                   total_steps=run_steps(context, len(split.used_index)),
                   family=context.baseline_preset,
                   source_optimizer=context.baseline_optimizer == "source",
                   jit_compile=context.jit_compile)

    def phase(self, epoch: int) -> str:
        return "fixmatch"

    def phase_step(self, phase: str) -> PhaseStep:
        return PhaseStep(self._forward, FixMatchMetrics, self._finish)

    def input_spec(self, split: TrainingSplit) -> InputSpec:
        return InputSpec({
            "labelled": Stream(split.labelled_index, self.labelled_batch_size, repeats=True),
            "unlabelled": Stream(split.used_index, self.unlabelled_batch_size,
                                 views={"weak": WEAK, "strong": STRONG})})

    def checkpoint_items(self) -> dict[str, tf.Module | tf.Variable]:
        return {"average": self.average, "updates": self.updates}

    def evaluated_models(self) -> dict[str, EmbeddingClassifier]:
        return {"": self.average, "trained": self.model}

    def _forward(self, batch):
        labelled, unlabelled = batch["labelled"], batch["unlabelled"]
        labelled_logits, weak_logits, strong_logits = self.joint_logits(
            [labelled["image"], unlabelled["weak"], unlabelled["strong"]])
        labelled_term, unlabelled_term, mask = (batch_mean(term) for term in (
            losses.pseudo_label_terms(labelled_logits, tf.cast(labelled["label"], tf.int64),
                                      weak_logits, strong_logits, self.threshold)))
        decay = self.weight_decay_penalty()
        loss = labelled_term.value + self.unlabelled_weight * unlabelled_term.value + decay
        return StepOutput(loss, FixMatchMetrics(
            labelled=labelled_term, unlabelled=unlabelled_term, mask=mask,
            weight_decay=replica_value(decay)))

    def _finish(self, batch):
        del batch  # The average follows the new weights.
        self.average_weights()
