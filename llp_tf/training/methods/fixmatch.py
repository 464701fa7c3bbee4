"""FixMatch (Sohn et al. 2020): a weak view's confident argmax trains the strong view.

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

Departures from the paper: the run's own optimizer and learning-rate
schedule (no cosine decay, no Nesterov), and the trained weights are
evaluated and exported (FixMatch evaluates an EMA of them).
"""

import dataclasses
from typing import Any

import keras
import tensorflow as tf

from llp_tf.config_fields import setting
from llp_tf.core import losses
from llp_tf.data.augmentation.views import STRONG, WEAK
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training.methods.base import (
    Forward, InputSpec, Method, Stream, TrainingSplit, split_batch)


@dataclasses.dataclass(frozen=True)
class FixMatchSettings:
    """FixMatch (Sohn et al. 2020): config section "fixmatch"."""

    threshold: float = setting(
        0.95, "tau: the max probability of the weak view a pseudo label needs (Sohn et al. "
        "2020, the value of their CIFAR-10/100, SVHN and STL-10 runs; fixmatch.py's "
        "--confidence default).", flag="fixmatch_threshold")
    unlabelled_ratio: int = setting(
        7, "mu: unlabelled examples per labelled one in a step; the labelled batch is "
        "global_batch_size // (1 + mu), the unlabelled one the rest (Sohn et al. 2020, "
        "the same runs; fixmatch.py's --uratio default).", flag="fixmatch_mu")
    unlabelled_weight: float = setting(
        1.0, "lambda_u: the weight of the masked cross-entropy of the strong views (Sohn et "
        "al. 2020, the same runs; fixmatch.py's --wu default).", flag="fixmatch_lambda_u")

    def problems(self, config: Any) -> list[str]:
        """What is wrong with these settings in the whole `TrainConfig`."""
        checks = [
            (0 <= self.threshold <= 1, "{fixmatch_threshold} must lie in [0, 1]"),
            (self.unlabelled_ratio >= 1, "{fixmatch_mu} must be at least 1"),
            (self.unlabelled_weight >= 0, "{fixmatch_lambda_u} cannot be negative"),
            (config.optimization.global_batch_size >= 1 + self.unlabelled_ratio,
             "{global_batch_size} must be at least 1 + {fixmatch_mu} (one labelled example a "
             "step)"),
        ]
        return [message for ok, message in checks if not ok]


class FixMatchMethod(Method):
    """FixMatch training (see the module docstring), with its `FixMatchSettings`."""

    name = "fixmatch"
    Settings = FixMatchSettings
    METRICS = {"fixmatch": ("loss", "labelled", "unlabelled", "mask", "weight_decay")}

    def __init__(self, strategy: tf.distribute.Strategy, model: EmbeddingClassifier,
                 optimizer: keras.optimizers.Optimizer, *, num_classes: int,
                 global_batch_size: int, weight_decay: float, settings: FixMatchSettings,
                 jit_compile: bool = False) -> None:
        super().__init__(strategy, model, optimizer, num_classes=num_classes,
                         global_batch_size=global_batch_size, weight_decay=weight_decay,
                         jit_compile=jit_compile)
        self.threshold = float(settings.threshold)
        self.unlabelled_weight = float(settings.unlabelled_weight)
        self.labelled_batch_size, self.unlabelled_batch_size = split_batch(
            self.global_batch_size, int(settings.unlabelled_ratio))

    @classmethod
    def from_config(cls, config, strategy, model, optimizer, num_classes, split):
        """The method of a `TrainConfig`; ``split`` is the run's `TrainingSplit`."""
        del split  # The input reads the split (input_spec).
        return cls(strategy, model, optimizer, num_classes=num_classes,
                   global_batch_size=config.optimization.global_batch_size,
                   weight_decay=config.optimization.weight_decay,
                   settings=config.method_settings, jit_compile=config.run.jit_compile)

    def phase(self, epoch: int) -> str:
        return "fixmatch"

    def step_parts(self, phase: str) -> tuple[Forward, None]:
        return self._forward, None

    def input_spec(self, split: TrainingSplit) -> InputSpec:
        return InputSpec({
            "labelled": Stream(split.labelled_index, self.labelled_batch_size, repeats=True),
            "unlabelled": Stream(split.used_index, self.unlabelled_batch_size,
                                 views={"weak": WEAK, "strong": STRONG})})

    def _forward(self, batch):
        labelled, unlabelled = batch["labelled"], batch["unlabelled"]
        labelled_logits, weak_logits, strong_logits = self.joint_logits(
            [labelled["image"], unlabelled["weak"], unlabelled["strong"]])
        labelled_term, unlabelled_term, mask_share = losses.pseudo_label_terms(
            labelled_logits, tf.cast(labelled["label"], tf.int64), weak_logits, strong_logits,
            self.threshold, self.labelled_batch_size, self.unlabelled_batch_size)
        decay = self.weight_decay_share()
        loss = labelled_term + self.unlabelled_weight * unlabelled_term + decay
        return loss, {"loss": loss, "labelled": labelled_term, "unlabelled": unlabelled_term,
                      "mask": mask_share, "weight_decay": decay}, ()
