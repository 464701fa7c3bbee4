"""Pseudo-label (Lee 2013): the current network's argmax as the label of unlabelled examples.

One configuration, whole: the pseudo-label baseline of the FixMatch codebase
(google-research/fixmatch ``pseudo_label.py``): weight 1, threshold 0.95, a
linear ramp to 0.4 of the run, equal labelled and unlabelled batches.

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
pass (no gradient through the choice); a confidence threshold optionally
keeps only the examples whose max probability reaches it (0: none dropped,
Lee's original):

    loss = sum_l CE(l) / B + alpha(t) * sum_u mask_u * CE(u, argmax_u) / U + decay

alpha(t) is a ramp over the epoch t (0-based): 0 before T1, linear from 0 at
T1 to alpha_f at T2, alpha_f from T2 on, with T1 and T2 fractions of the run's
epochs (`PseudoLabelSettings`: pseudo_label.py's ramp from 0 to 0.4 of the
run, or Lee's delay as a fraction); it is constant within an epoch and set
before each (`before_epoch`), so a resumed run sees the same values.
pseudo_label.py ramps per step: the demo's 40 epochs make the ramp 16 stairs.
"""

import dataclasses
from typing import Any

import keras
import tensorflow as tf

from llp_tf.config_fields import setting
from llp_tf.core import losses
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training.methods.base import (
    Forward, InputSpec, Method, Stream, TrainingSplit, split_batch)

#: How a step's labelled and unlabelled batches pass batch norm (module docstring).
BATCH_NORM_PASSES = ("separate", "joint")


@dataclasses.dataclass(frozen=True)
class PseudoLabelSettings:
    """Pseudo-label (Lee 2013): config section "pseudo_label"."""

    final_weight: float = setting(
        1.0, "alpha_f: the weight of the unlabelled cross-entropy after the ramp: 1, the "
        "FixMatch codebase's pseudo-label baseline (google-research/fixmatch pseudo_label.py "
        "--consistency_weight). Lee 2013's configuration: 3, with his delay "
        "(pseudo_label_ramp_start) and no threshold.", flag="pseudo_label_final_weight")
    ramp_start: float = setting(
        0.0, "T1 as a fraction of the run's epochs: the unlabelled weight is 0 before it. 0: "
        "pseudo_label.py ramps from the start. Lee 2013's T1 = 100 of his T2 = 600 epochs "
        "is 1/6 of the ramp's end.", flag="pseudo_label_ramp_start")
    ramp_end: float = setting(
        0.4, "T2 as a fraction of the run's epochs: the weight reaches alpha_f there. 0.4: "
        "pseudo_label.py's --warmup_pos (Lee 2013: T2 = 600 epochs).",
        flag="pseudo_label_ramp_end")
    threshold: float = setting(
        0.95, "The max probability an unlabelled example's pseudo label needs to count: 0.95, "
        "pseudo_label.py's --threshold. 0 keeps all (Lee 2013).",
        flag="pseudo_label_threshold")
    unlabelled_ratio: int = setting(
        1, "Unlabelled examples per labelled one in a step: the labelled batch is "
        "global_batch_size // (1 + ratio), the unlabelled one the rest. 1: pseudo_label.py's "
        "equal labelled and unlabelled batches (64 each).",
        flag="pseudo_label_unlabelled_ratio")
    batch_norm: str = setting(
        "separate", "How the labelled and unlabelled batches pass batch norm. separate: two "
        "training-mode passes, each batch normalised with its own moments, the moving "
        "statistics updated from the labelled pass only, as the FixMatch code's pseudo-label "
        "baseline (google-research/fixmatch pseudo_label.py) and USB "
        "(semilearn/algorithms/pseudolabel/pseudolabel.py). joint: one pass over both "
        "batches, whose moments and moving statistics are those of the joint batch.",
        choices=BATCH_NORM_PASSES, flag="pseudo_label_batch_norm")

    def problems(self, config: Any) -> list[str]:
        """What is wrong with these settings in the whole `TrainConfig`."""
        checks = [
            (self.final_weight >= 0, "{pseudo_label_final_weight} cannot be negative"),
            (0 <= self.ramp_start <= self.ramp_end,
             "{pseudo_label_ramp_start} and {pseudo_label_ramp_end} must satisfy "
             "0 <= start <= end"),
            (0 <= self.threshold <= 1, "{pseudo_label_threshold} must lie in [0, 1]"),
            (self.unlabelled_ratio >= 1, "{pseudo_label_unlabelled_ratio} must be at least 1"),
            (config.optimization.global_batch_size >= 1 + self.unlabelled_ratio,
             "{global_batch_size} must be at least 1 + {pseudo_label_unlabelled_ratio} (one "
             "labelled example a step)"),
        ]
        return [message for ok, message in checks if not ok]


def ramp_weight(epoch: int, start: float, end: float, final: float) -> float:
    """Lee's alpha(t) at 0-based ``epoch``: 0 before ``start``, ``final`` from
    ``end`` on, linear between (``start == end``: a step at ``start``)."""
    if epoch < start:
        return 0.0
    if epoch >= end:
        return float(final)
    return float(final) * (epoch - start) / (end - start)


class PseudoLabelMethod(Method):
    """Pseudo-label training (see the module docstring), with its `PseudoLabelSettings`;
    ``epochs`` (the run's) turns the ramp's fractions into T1 and T2."""

    name = "pseudo_label"
    Settings = PseudoLabelSettings
    METRICS = {"pseudo_label": ("loss", "labelled", "unlabelled", "unlabelled_weight",
                                "mask", "weight_decay")}

    def __init__(self, strategy: tf.distribute.Strategy, model: EmbeddingClassifier,
                 optimizer: keras.optimizers.Optimizer, *, num_classes: int,
                 global_batch_size: int, weight_decay: float, settings: PseudoLabelSettings,
                 epochs: int, jit_compile: bool = False) -> None:
        super().__init__(strategy, model, optimizer, num_classes=num_classes,
                         global_batch_size=global_batch_size, weight_decay=weight_decay,
                         jit_compile=jit_compile)
        self.final_weight = float(settings.final_weight)
        self.ramp_start_epoch = settings.ramp_start * epochs
        self.ramp_end_epoch = settings.ramp_end * epochs
        self.threshold = float(settings.threshold)
        if settings.batch_norm not in BATCH_NORM_PASSES:
            raise ValueError(f"batch_norm must be one of {BATCH_NORM_PASSES}, "
                             f"not {settings.batch_norm!r}")
        self.batch_norm = settings.batch_norm
        self.labelled_batch_size, self.unlabelled_batch_size = split_batch(
            self.global_batch_size, int(settings.unlabelled_ratio))
        with strategy.scope():
            # alpha(t) of the current epoch, set by before_epoch (not checkpointed:
            # a resumed run sets it again before its first step).
            self.unlabelled_weight = tf.Variable(0.0, trainable=False,
                                                 name="unlabelled_weight")

    @classmethod
    def from_config(cls, config, strategy, model, optimizer, num_classes, split):
        """The method of a `TrainConfig`; ``split`` is the run's `TrainingSplit`."""
        del split  # The input reads the split (input_spec).
        return cls(strategy, model, optimizer, num_classes=num_classes,
                   global_batch_size=config.optimization.global_batch_size,
                   weight_decay=config.optimization.weight_decay,
                   settings=config.method_settings, epochs=config.optimization.epochs,
                   jit_compile=config.run.jit_compile)

    def phase(self, epoch: int) -> str:
        return "pseudo_label"

    def step_parts(self, phase: str) -> tuple[Forward, None]:
        return self._forward, None

    def input_spec(self, split: TrainingSplit) -> InputSpec:
        return InputSpec({
            "labelled": Stream(split.labelled_index, self.labelled_batch_size, repeats=True),
            "unlabelled": Stream(split.used_index, self.unlabelled_batch_size)})

    def before_epoch(self, epoch: int, phase: str) -> None:
        self.unlabelled_weight.assign(ramp_weight(
            epoch, self.ramp_start_epoch, self.ramp_end_epoch, self.final_weight))

    def _forward(self, batch):
        labelled, unlabelled = batch["labelled"], batch["unlabelled"]
        labelled_logits, unlabelled_logits = self._logits(labelled["image"],
                                                          unlabelled["image"])
        labelled_term, unlabelled_term, mask_share = losses.pseudo_label_terms(
            labelled_logits, tf.cast(labelled["label"], tf.int64), unlabelled_logits,
            unlabelled_logits, self.threshold, self.labelled_batch_size,
            self.unlabelled_batch_size)
        weight = tf.convert_to_tensor(self.unlabelled_weight)
        decay = self.weight_decay_share()
        loss = labelled_term + weight * unlabelled_term + decay
        replicas = self.strategy.num_replicas_in_sync
        return loss, {"loss": loss, "labelled": labelled_term, "unlabelled": unlabelled_term,
                      "unlabelled_weight": weight / replicas, "mask": mask_share,
                      "weight_decay": decay}, ()

    def _logits(self, labelled_images, unlabelled_images):
        """Training-mode logits, float32 [B, C] and [U, C] (module docstring)."""
        if self.batch_norm == "joint":
            return self.joint_logits([labelled_images, unlabelled_images])
        return [tf.cast(self.model(images, training=True,
                                   update_moving_statistics=update)["logits"], tf.float32)
                for images, update in ((labelled_images, True), (unlabelled_images, False))]
