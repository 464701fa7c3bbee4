"""Local Label Propagation as a training method: instance recognition, then LLP.

Phases:

- ``"warmup"`` (epochs before ``warmup_epochs``): instance recognition (Wu
  et al. 2018). Every example's label is its own instance id, so the
  aggregation loss over the whole bank is the exact non-parametric softmax;
  no categorisation loss.
- ``"llp"``: read the batch's labels and confidences from the bank; loss =
  mean of c * (L_C + L_A) + weight decay; SGD step; propagate pseudo labels
  to the batch from its embeddings; write them and the new embeddings into
  the bank (a `Bank`: replicated or sharded, the step is the same).

Metrics of an LLP step (besides the loss terms, `LLPMetrics`): ``pseudo_labelled``, the
share of the batch's rows whose bank label is a class (labelled, or
pseudo-labelled by an earlier step), and ``confidence``, the mean
confidence of those rows (a `subset_mean`: rows still holding their
instance id have confidence 1 and no class, and are left out).

State added to the checkpoint: the memory bank (``bank``) and the epoch whose
labelled densities are current (``density_epoch``). Before each LLP epoch
the densities are refreshed (eq. 7) if they belong to another epoch.
"""

import dataclasses
import os
import sys
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from llp_tf.config_fields import setting
from llp_tf.core import hyperparameters, label_encoding, losses
from llp_tf.core.propagation import DENSITY_NORMALISATIONS
from llp_tf.core.bank import Bank, BankWrite
from llp_tf.core.bank_dtype import BANK_DTYPES
from llp_tf.core.bank_factory import build_bank
from llp_tf.data.splits import regime
from llp_tf.errors import ConfigError
from llp_tf.training.methods.base import (InputSpec, Method, PhaseStep, StepOutput, Stream,
                                          TrainingSplit)
from llp_tf.training.methods.context import MethodContext
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training.run_directory import RunDirectory
from llp_tf.training.step_metrics import (
    Mean, StepMetrics, SubsetMean, batch_mean, replica_value, subset_mean)
from llp_tf.tensor_types import Array


#: Where LLP's pseudo labels come from: the locally weighted kNN (eq. 7-8),
#: the plain weighted kNN (eq. 5-6), or the category head's argmax.
PROPAGATIONS = ("local", "knn", "classifier")


@dataclasses.dataclass(frozen=True)
class LLPSettings:
    """LLP's settings: config section "llp" (flags without a prefix, as before
    the methods had sections of their own). Defaults are the paper's
    (`llp_tf.core.hyperparameters`)."""

    warmup_epochs: int = setting(10, "Epochs of instance-recognition warm start before LLP.")
    propagation: str = setting(
        PROPAGATIONS[0], "Pseudo labels from the locally weighted kNN (LLP, eq. 7-8), the plain "
        "weighted kNN (eq. 5-6), or the category head's argmax with its probability as "
        "confidence (classifier: the variant the release intended; the release itself stored "
        "that class without its label offset, so its pseudo labels fell among the instance "
        "ids, never aggregated with their class and had no categorisation loss, a slip that "
        "is not reproduced here).", choices=PROPAGATIONS)
    k: int = setting(hyperparameters.K, "K: labelled neighbours that vote.")
    t: int = setting(hyperparameters.T, "T: neighbours in the local density estimate (the "
                     "release used 50).")
    temperature: float = setting(hyperparameters.TEMPERATURE, "tau of every softmax over the "
                                 "memory bank.")
    bank_momentum: float = setting(hyperparameters.BANK_MOMENTUM, "m of the memory-bank row "
                                   "update.")
    weight_by_confidence: bool = setting(True, "Weight each example's loss by its confidence "
                                         "(--noweight_by_confidence: the 'woc' ablation).")
    use_categorisation: bool = setting(True, "Include the category head's cross-entropy in the "
                                       "LLP loss.")
    density_normalisation: str = setting(
        DENSITY_NORMALISATIONS[0], "How rho of eq. 7 is normalised: release "
        "(rho_i = sum of exp(v_j . v_i / tau) over the T nearest bank rows, Z treated as a "
        "constant, as the authors' release computes it) or paper (eq. 7 as written: the sum "
        "of P(j|v_i) = exp(v_j . v_i / tau) / Z(v_i) over those rows, Z(v_i) summed over the "
        "whole bank, so each labelled row has its own normaliser). Log space, float32.",
        choices=DENSITY_NORMALISATIONS)
    density_chunk_size: int = setting(hyperparameters.DENSITY_CHUNK_SIZE, "Labelled rows per "
                                      "chunk of the density refresh; bounds its memory.")
    warm_start: Optional[str] = setting(None, "Run directory or checkpoint of an instance-"
                                        "recognition run: start LLP from its model and bank.")
    shard_bank: bool = setting(False, "Split the memory bank over every replica, of this "
                               "machine or of every worker of a --cluster (each holds N / R "
                               "rows, their labels, confidences and densities) instead of a "
                               "copy on each; the losses, pseudo labels and densities are the "
                               "same. Each worker checkpoints only its rows, as slices of one "
                               "bank; the run resumes at any worker or replica count, sharded "
                               "or not. Not with --jit_compile.")
    bank_dtype: str = setting(
        "float32", "The dtype the memory bank stores its embeddings in: float32 (the "
        "default, as in the paper), or bfloat16 / float16, which halve the bank's bytes. Only "
        "storage: each row read is cast up and every computation (row update, propagation, "
        "densities, aggregation loss) stays float32; a row written is rounded to nearest. A "
        "checkpoint of another bank dtype restores converted.", choices=tuple(BANK_DTYPES))

    def problems(self, context: MethodContext) -> list[str]:
        """What is wrong with these settings in their run's `MethodContext`."""
        warmup, epochs = self.warmup_epochs, context.epochs
        checks = [
            (0 <= warmup, "{warmup_epochs} cannot be negative"),
            (warmup <= epochs,
             "{warmup_epochs} cannot exceed {epochs}: the run would end inside the warm-up "
             f"(instance recognition), before LLP; give --epochs={warmup + 1} or more, or "
             f"--warmup_epochs={epochs} or less (equal: an instance-recognition run only)"),
            (self.k > 0 and self.t > 0, "{k} and {t} must be positive"),
            (self.temperature > 0, "{temperature} must be positive"),
            (0 <= self.bank_momentum < 1, "{bank_momentum} must lie in [0, 1)"),
            (not (self.shard_bank and context.jit_compile),
             "{shard_bank} exchanges shares between replicas inside the step, which "
             "{jit_compile} cannot compile; give one of them"),
        ]
        return [message for ok, message in checks if not ok]


def few_labels_warning(settings: LLPSettings, labelled_labels: Array,
                       num_classes: int) -> Optional[str]:
    """A one-line warning when K (``settings.k``) exceeds the labelled images of the smallest
    class that has any (``labelled_labels`` int [M] in [0, C)) and pseudo labels come from a
    kNN vote, else None: every vote for such a class then holds other classes' images."""
    if settings.propagation == "classifier" or not len(labelled_labels):
        return None
    counts = np.bincount(np.asarray(labelled_labels, np.int64), minlength=num_classes)
    present = np.flatnonzero(counts)
    smallest = int(present[np.argmin(counts[present])])
    fewest = int(counts[smallest])
    if settings.k <= fewest:
        return None
    short = int(np.sum(counts[present] < settings.k))
    return (f"warning: --k={settings.k} exceeds the {fewest} labelled images of the smallest "
            f"class (class {smallest}; {short} of {present.size} classes have fewer than "
            f"{settings.k}): at least {settings.k - fewest} of the {settings.k} votes for an "
            "image of that class come from other classes. The paper's regimes keep K at or "
            "below the labelled images a class on average (ImageNet 1%: 12.8); give --k="
            f"{fewest} or less, or more labels (--label_percent).")


@dataclasses.dataclass(frozen=True)
class WarmupMetrics(StepMetrics):
    """A warm-up step's: the aggregation loss over instance ids and the weight decay."""

    aggregation: Mean
    weight_decay: Mean


@dataclasses.dataclass(frozen=True)
class LLPMetrics(StepMetrics):
    """An LLP step's: its loss terms, the mean confidence of the rows whose bank label is a
    class, and the share of those rows (module docstring)."""

    aggregation: Mean
    categorisation: Mean
    weight_decay: Mean
    confidence: SubsetMean
    pseudo_labelled: Mean


class LLPMethod(Method):
    """LLP with its instance-recognition warm start (see the module docstring), with its
    `LLPSettings`.

    ``bank`` is any `Bank` (`from_context` builds it by `bank_factory.build_bank`, sharded
    with ``shard_bank``); ``used_index`` (int64 [U], the
    run's used examples) checks that a warm-start run used the same examples.
    """

    name = "llp"
    Settings = LLPSettings
    keeps_bank = True
    PHASES = ("warmup", "llp")

    def __init__(self, strategy: tf.distribute.Strategy, model: EmbeddingClassifier,
                 optimizer: keras.optimizers.Optimizer, bank: Bank, *,
                 num_classes: int, global_batch_size: int, weight_decay: float,
                 settings: LLPSettings, used_index: Optional[Array] = None,
                 jit_compile: bool = False) -> None:
        super().__init__(strategy, model, optimizer, num_classes=num_classes,
                         global_batch_size=global_batch_size, weight_decay=weight_decay,
                         jit_compile=jit_compile)
        self._bank = bank
        self.temperature = float(settings.temperature)
        self.k = int(settings.k)
        self.t = int(settings.t)
        self.propagation_method = settings.propagation
        self.weight_by_confidence = bool(settings.weight_by_confidence)
        self.use_categorisation = bool(settings.use_categorisation)
        self.density_chunk_size = int(settings.density_chunk_size)
        self.density_normalisation = settings.density_normalisation
        self.warmup_epochs = int(settings.warmup_epochs)
        self.warm_start = settings.warm_start
        self.used_index = used_index
        with strategy.scope():
            self.density_epoch = tf.Variable(-1, dtype=tf.int64, trainable=False,
                                             name="density_epoch")
        self._density_function = None

    @classmethod
    def from_context(cls, context, strategy, model, optimizer, num_classes, split):
        m = context.settings
        warning = few_labels_warning(m, split.labelled_labels, num_classes)
        if warning:
            sys.stderr.write(warning + "\n")
        bank = build_bank(strategy, len(split.used_index), model.embedding_dim,
                          num_classes, regime.dense_index(split.used_index, split.labelled_index),
                          split.labelled_labels, sharded=m.shard_bank, momentum=m.bank_momentum,
                          seed=context.seed, embedding_dtype=m.bank_dtype)
        return cls(strategy, model, optimizer, bank, num_classes=num_classes,
                   global_batch_size=context.global_batch_size,
                   weight_decay=context.weight_decay, settings=m,
                   used_index=split.used_index, jit_compile=context.jit_compile)

    # ---- the Method interface ------------------------------------------------

    @property
    def bank(self) -> Bank:
        return self._bank

    def phase(self, epoch: int) -> str:
        return "warmup" if epoch < self.warmup_epochs else "llp"

    def phase_step(self, phase: str) -> PhaseStep:
        if phase == "warmup":
            return PhaseStep(self._warmup_forward, WarmupMetrics)
        return PhaseStep(self._llp_forward, LLPMetrics)

    def input_spec(self, split: TrainingSplit) -> InputSpec:
        # "index" is the bank row: the position in the used set.
        return InputSpec({"used": Stream(split.used_index, self.global_batch_size)})

    def checkpoint_items(self) -> dict[str, tf.Module | tf.Variable]:
        return {"bank": self._bank, "density_epoch": self.density_epoch}

    def before_epoch(self, epoch: int, phase: str) -> None:
        if (phase == "llp" and self.propagation_method == "local"
                and int(self.density_epoch.numpy()) != epoch):
            self.refresh_density()
            self.density_epoch.assign(epoch)

    def tracks_plateau(self, phase: str) -> bool:
        # Validation top-1 means nothing while the head is not trained.
        return phase != "warmup"

    def initialise(self, steps_per_epoch: int) -> Optional[tuple[int, str]]:
        if not self.warm_start:
            return None
        self._load_warm_start(self.warm_start)
        return (self.warmup_epochs * steps_per_epoch,
                f"Warm start from {self.warm_start}: LLP from epoch {self.warmup_epochs}.")

    # ---- LLP ----------------------------------------------------------------

    def refresh_density(self) -> None:
        """Recomputes rho of every labelled example against the whole bank (eq. 7)."""
        if self._density_function is None:
            self._density_function = tf.function(self._refresh_density)
        self._density_function()

    def _refresh_density(self):
        self._bank.refresh_density(t=self.t, temperature=self.temperature,
                                   chunk_size=self.density_chunk_size,
                                   normalisation=self.density_normalisation)

    def _load_warm_start(self, warm_start):
        """Loads the model and the bank's ``embeddings`` (`Bank`'s checkpoint names) of an
        instance-recognition run, the embeddings block by block into this process's rows."""
        run_dir = warm_start if os.path.isdir(warm_start) else os.path.dirname(
            os.path.dirname(warm_start))
        path = (RunDirectory(warm_start).latest_checkpoint() if os.path.isdir(warm_start)
                else warm_start)
        if path is None:
            raise ConfigError(f"--warm_start {warm_start} holds no checkpoint.")
        split_path = RunDirectory(run_dir).split_path
        if os.path.exists(split_path) and self.used_index is not None:
            _, warm_used = regime.read_split_indices(split_path)
            if not np.array_equal(warm_used, self.used_index):
                raise ConfigError(
                    f"The warm-start run {run_dir} used another set of training examples "
                    "than this run; its bank rows would belong to other images.")
        partial = tf.train.Checkpoint(
            model=self.model,
            bank=tf.train.Checkpoint(embeddings=self._bank.state.embeddings))
        try:
            partial.restore(path).expect_partial().assert_existing_objects_matched()
        except (ValueError, AssertionError, tf.errors.InvalidArgumentError) as error:
            raise ConfigError(f"Cannot warm-start from {path}: {error}") from None

    def _warmup_forward(self, batch):
        index = tf.cast(batch["used"]["index"], tf.int64)
        labels = label_encoding.instance_labels(index, self.num_classes)
        outputs = self.model(batch["used"]["image"], training=True)
        aggregation = batch_mean(self._bank.aggregation_loss(
            outputs["embedding"], labels, self.temperature, instance_labels=True))
        decay = self.weight_decay_penalty()
        return StepOutput(aggregation.value + decay,
                          WarmupMetrics(aggregation=aggregation, weight_decay=replica_value(decay)),
                          BankWrite(index, tf.stop_gradient(outputs["embedding"])))

    def _llp_forward(self, batch):
        index = tf.cast(batch["used"]["index"], tf.int64)
        # The loss uses the state as read at the start of the step.
        labels, confidence = self._bank.read(index)
        outputs = self.model(batch["used"]["image"], training=True)
        aggregation = self._bank.aggregation_loss(outputs["embedding"], labels, self.temperature)
        categorisation = losses.categorisation_loss(outputs["logits"], labels)
        decay = self.weight_decay_penalty()
        loss = losses.llp_loss(aggregation, categorisation, confidence,
                               weight_by_confidence=self.weight_by_confidence,
                               use_categorisation=self.use_categorisation) + decay

        # The bank is written after the step: propagation reads it as it was.
        embedding = tf.stop_gradient(outputs["embedding"])
        classes, new_confidence = self._propagate(embedding, outputs["logits"])
        has_class = tf.cast(label_encoding.is_class(labels, self.num_classes), tf.float32)
        metrics = LLPMetrics(
            aggregation=batch_mean(aggregation), categorisation=batch_mean(categorisation),
            weight_decay=replica_value(decay), confidence=subset_mean(confidence, has_class),
            pseudo_labelled=batch_mean(has_class))
        return StepOutput(loss, metrics, BankWrite(index, embedding, classes, new_confidence))

    def _propagate(self, embedding, logits):
        """Pseudo classes int64 [B] and confidences float32 [B] for a batch."""
        if self.propagation_method == "classifier":
            probabilities = tf.nn.softmax(tf.stop_gradient(logits))
            return tf.argmax(probabilities, axis=1), tf.reduce_max(probabilities, axis=1)
        return self._bank.propagate(embedding, k=self.k, temperature=self.temperature,
                                    local_weights=self.propagation_method == "local")

