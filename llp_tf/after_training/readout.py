"""The linear readout of the probe, trained on cached features.

See `llp_tf.after_training.linear_probe` for the protocol: zero-initialised
``Dense(C)``, SGD with momentum, drops on validation plateaus, a batch order
seeded by (seed, epoch).
"""

import dataclasses
import math
import sys
import time
from typing import Any, TextIO

import keras
import numpy as np
import tensorflow as tf

from llp_tf.after_training.features import (DEFAULT_BATCH_SIZE, LOG_EVERY_SECONDS, FeatureSet,
                                            standardizer)
from llp_tf.errors import ConfigError
from llp_tf.training.progress import EpochProgress, is_interactive
from llp_tf.training.schedule import PlateauTracker
from llp_tf.types import Array

#: The paper's initial learning rate of the Places205 readout.
DEFAULT_LEARNING_RATE = 0.01
#: The momentum of the paper's SGD for the network (see the module docstring).
DEFAULT_MOMENTUM = 0.9
#: x0.1 per drop and two drops, as in the paper's Places205 readout.
DEFAULT_DROP_FACTOR = 0.1
DEFAULT_MAX_DROPS = 2
#: Epochs without a new best validation top-1 before a drop. The paper says
#: only "when validation saturates". On mnist5k and digits (1-4k examples),
#: 5 dropped the rate while raw features were still being fitted; 10 was
#: within a point of 20 (see the module docstring on standardisation).
DEFAULT_PATIENCE = 10
#: Upper bound on epochs; the plateau rule usually stops earlier.
DEFAULT_EPOCHS = 100
#: Smallest improvement of validation top-1 that counts as a new best.
PLATEAU_MIN_DELTA = 1e-4
#: top-k of the second reported accuracy (capped at C).
TOP_K = 5
#: Features per forward pass of the readout when evaluating: bounds the
#: memory of the logits ([B, C] floats), nothing else depends on it.
EVALUATION_BATCH_SIZE = 4096


@dataclasses.dataclass(frozen=True)
class ProbeSettings:
    """How the readout is trained (see the module docstring).

    Attributes:
      epochs: int > 0, maximum passes over the training features.
      batch_size: int > 0, features per SGD step.
      learning_rate: float > 0, initial rate.
      momentum: float in [0, 1).
      patience: int > 0, epochs without a new best validation top-1 before a
        drop (or, after ``max_drops`` drops, before stopping).
      max_drops: int >= 0.
      drop_factor: float in (0, 1).
      seed: int >= 0, seed of the batch order.
      standardize: bool; if True, features are shifted and scaled by the
        training split's per-feature mean and standard deviation (not in
        the paper; off by default).
    """

    epochs: int = DEFAULT_EPOCHS
    batch_size: int = DEFAULT_BATCH_SIZE
    learning_rate: float = DEFAULT_LEARNING_RATE
    momentum: float = DEFAULT_MOMENTUM
    patience: int = DEFAULT_PATIENCE
    max_drops: int = DEFAULT_MAX_DROPS
    drop_factor: float = DEFAULT_DROP_FACTOR
    seed: int = 0
    standardize: bool = False

    def __post_init__(self):
        problems = []
        for name in ("epochs", "batch_size", "patience"):
            value = getattr(self, name)
            if not _is_int(value) or value <= 0:
                problems.append(f"{name} must be a positive integer (got {value!r})")
        for name in ("max_drops", "seed"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                problems.append(f"{name} must be an integer >= 0 (got {value!r})")
        if not (isinstance(self.learning_rate, (int, float)) and
                math.isfinite(self.learning_rate) and self.learning_rate > 0):
            problems.append(f"learning_rate must be a positive number (got "
                            f"{self.learning_rate!r})")
        if not (isinstance(self.momentum, (int, float)) and 0 <= self.momentum < 1):
            problems.append(f"momentum must lie in [0, 1) (got {self.momentum!r})")
        if not (isinstance(self.drop_factor, (int, float)) and 0 < self.drop_factor < 1):
            problems.append(f"drop_factor must lie in (0, 1) (got {self.drop_factor!r})")
        if problems:
            raise ConfigError("Invalid linear-probe settings: " + "; ".join(problems) + ".")


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


@dataclasses.dataclass
class ProbeResult:
    """Outcome of one readout training.

    Attributes:
      top1, top5: float, validation accuracies of the final readout; top5 is
        top-k with k = min(5, C) (``top5_k``).
      loss: float, mean validation cross-entropy of the final readout.
      train_loss, train_top1: float, of the final readout on the training
        features.
      best_top1, best_epoch: the best validation top-1 over the epochs and
        the (1-based) epoch it was reached.
      epochs: int, epochs trained.
      drops: int, learning-rate drops taken.
      drop_epochs: list of int, the epochs after which the rate dropped.
      stopped_on_plateau: bool, True if training ended because validation
        saturated after the last drop (False: ``epochs`` ran out).
      final_learning_rate: float.
      history: list of dict per epoch (epoch, learning_rate, loss, top1, top5).
      seconds: float, training time.
    """

    top1: float
    top5: float
    top5_k: int
    loss: float
    train_loss: float
    train_top1: float
    best_top1: float
    best_epoch: int
    epochs: int
    drops: int
    drop_epochs: list[int]
    stopped_on_plateau: bool
    final_learning_rate: float
    history: list[dict[str, float]]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """dict of every attribute (JSON-ready: numbers, lists, dicts)."""
        return dataclasses.asdict(self)


def _log(stream, message):
    stream.write(message + "\n")
    stream.flush()


class LinearReadout:
    """``keras.layers.Dense(C)`` on features [B, F], trained with SGD on softmax
    cross-entropy.

    Args:
      feature_dim: int F.
      num_classes: int C.
      learning_rate: float, initial rate.
      momentum: float.
    """

    def __init__(self, feature_dim: int, num_classes: int,
                 learning_rate: float = DEFAULT_LEARNING_RATE,
                 momentum: float = DEFAULT_MOMENTUM) -> None:
        self.num_classes = int(num_classes)
        self.dense = keras.layers.Dense(self.num_classes, kernel_initializer="zeros",
                                        bias_initializer="zeros", name="linear_readout")
        self.dense.build((None, int(feature_dim)))
        self.optimizer = keras.optimizers.SGD(learning_rate=learning_rate, momentum=momentum)
        self.optimizer.build(self.dense.trainable_variables)
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        signature = [tf.TensorSpec([None, int(feature_dim)], tf.float32),
                     tf.TensorSpec([None], tf.int64)]
        self._train_step = tf.function(self._step, input_signature=signature)
        self._batch_stats = tf.function(self._stats, input_signature=signature)

    @property
    def learning_rate(self) -> float:
        """float: the optimizer's current learning rate (settable)."""
        return float(self.optimizer.learning_rate.numpy())

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self.optimizer.learning_rate.assign(value)

    def weights(self) -> tuple[Array, Array]:
        """(kernel float32 [F, C], bias float32 [C]) as numpy arrays."""
        return self.dense.kernel.numpy(), self.dense.bias.numpy()

    def _step(self, features, labels):
        with tf.GradientTape() as tape:
            loss = self._loss(labels, self.dense(features))
        variables = self.dense.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    def _stats(self, features, labels):
        logits = self.dense(features)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        top1 = tf.equal(tf.argmax(logits, axis=1, output_type=tf.int64), labels)
        topk = tf.math.in_top_k(labels, logits, min(TOP_K, self.num_classes))
        return (tf.reduce_sum(losses), tf.reduce_sum(tf.cast(top1, tf.float32)),
                tf.reduce_sum(tf.cast(topk, tf.float32)))

    def train_epoch(self, features: Array, labels: Array, order: Array,
                    batch_size: int) -> float:
        """One pass of SGD steps over ``features[order]`` in batches.

        Args:
          features: float32 [N, F]; labels: int64 [N]; order: int [N].
          batch_size: int; the last batch may be smaller.

        Returns:
          float, the mean of the steps' batch losses (before each step).
        """
        losses = []
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            losses.append(float(self._train_step(features[rows], labels[rows])))
        return float(np.mean(losses))

    def evaluate(self, features: Array, labels: Array,
                 batch_size: int | None = None) -> dict[str, float]:
        """dict loss (mean cross-entropy), top1, top5 over all the examples."""
        batch_size = batch_size or EVALUATION_BATCH_SIZE
        totals = np.zeros(3)
        for start in range(0, len(labels), batch_size):
            batch = self._batch_stats(features[start:start + batch_size],
                                      labels[start:start + batch_size])
            totals += [float(value) for value in batch]
        count = max(len(labels), 1)
        return {"loss": totals[0] / count, "top1": totals[1] / count, "top5": totals[2] / count}


def _check_feature_sets(train, validation, num_classes):
    if train.features.ndim != 2 or validation.features.ndim != 2 or \
            train.features.shape[1] != validation.features.shape[1]:
        raise ConfigError(f"Training and validation features must both be [N, F] with the same "
                          f"F; got {train.features.shape} and {validation.features.shape}.")
    for name, features in (("training", train), ("validation", validation)):
        if len(features.labels) == 0:
            raise ConfigError(f"The {name} split has no examples to probe with.")
        if features.labels.min() < 0 or features.labels.max() >= num_classes:
            raise ConfigError(f"The {name} labels must lie in [0, {num_classes}).")
        if not np.all(np.isfinite(features.features)):
            raise ConfigError(f"The {name} features contain NaN or infinite values; the "
                              "trunk's checkpoint is broken or diverged.")


def _inputs(train, validation, num_classes, standardize):
    """The readout's training and validation inputs, float32 [N, F] each, after
    checking the feature sets."""
    _check_feature_sets(train, validation, num_classes)
    if not standardize:
        return train.features, validation.features
    mean, scale = standardizer(train.features)
    return (train.features - mean) / scale, (validation.features - mean) / scale


def _on_plateau(readout, settings, drop_epochs, epoch, description, stream, interactive):
    """Drops the readout's rate after a plateau, or says to stop once every drop is
    taken; returns whether to stop."""
    learning_rate = readout.learning_rate
    stop = len(drop_epochs) >= settings.max_drops
    if stop:
        note = (f"{description}: validation top-1 saturated after epoch {epoch} at the "
                f"last rate; stopping")
    else:
        readout.learning_rate = learning_rate * settings.drop_factor
        drop_epochs.append(epoch)
        note = (f"{description}: validation top-1 saturated after epoch {epoch}; "
                f"learning rate {learning_rate:g} -> {readout.learning_rate:g}")
    _log(stream, ("\n" if interactive and epoch < settings.epochs else "") + note)
    return stop


def _check_finite(loss, description, epoch, learning_rate):
    """ConfigError when an epoch's mean loss is not finite: the readout diverged."""
    if not math.isfinite(loss):
        raise ConfigError(
            f"The {description} diverged in epoch {epoch} (loss {loss}) at learning rate "
            f"{learning_rate:g}; lower --learning_rate or standardise the features "
            "(--standardize).")


def train_readout(train: FeatureSet, validation: FeatureSet, num_classes: int,
                  settings: ProbeSettings = ProbeSettings(), stream: TextIO | None = None,
                  description: str = "readout") -> tuple[LinearReadout, ProbeResult]:
    """Trains a linear readout on cached features (see the module docstring).

    Args:
      train, validation: `FeatureSet`.
      num_classes: int C of the probe dataset.
      settings: `ProbeSettings`.
      stream: where progress goes (stdout when None).
      description: str, names the probe in progress lines.

    Returns:
      (`LinearReadout`, `ProbeResult`). With ``settings.standardize`` the
      readout takes standardised features (see `standardizer`).

    Raises:
      ConfigError: bad feature sets, or the training diverged (non-finite loss).
    """
    stream = stream or sys.stdout
    train_features, validation_features = _inputs(train, validation, num_classes,
                                                  settings.standardize)
    train_labels, validation_labels = train.labels, validation.labels
    readout = LinearReadout(train_features.shape[1], num_classes, settings.learning_rate,
                            settings.momentum)
    tracker = PlateauTracker(settings.patience, min_delta=PLATEAU_MIN_DELTA)
    progress = EpochProgress(description, settings.epochs, len(train_labels), stream=stream,
                             log_every_seconds=LOG_EVERY_SECONDS)
    interactive = is_interactive(stream)
    history, drop_epochs, best_top1, best_epoch, stopped_on_plateau = [], [], -1.0, 0, False
    start = time.monotonic()
    for epoch in range(1, settings.epochs + 1):
        order = np.random.default_rng([settings.seed, epoch]).permutation(len(train_labels))
        learning_rate = readout.learning_rate
        loss = readout.train_epoch(train_features, train_labels, order, settings.batch_size)
        _check_finite(loss, description, epoch, learning_rate)
        metrics = readout.evaluate(validation_features, validation_labels)
        history.append({"epoch": epoch, "learning_rate": learning_rate, "loss": loss,
                        "top1": metrics["top1"], "top5": metrics["top5"]})
        if metrics["top1"] > best_top1:
            best_top1, best_epoch = metrics["top1"], epoch
        progress.update(epoch, {"lr": learning_rate, "loss": loss, "val_top1": metrics["top1"]})
        if tracker.update(metrics["top1"]):
            stopped_on_plateau = _on_plateau(readout, settings, drop_epochs, epoch, description,
                                             stream, interactive)
            if stopped_on_plateau:
                break
    seconds = time.monotonic() - start
    final = readout.evaluate(validation_features, validation_labels)
    train_final = readout.evaluate(train_features, train_labels)
    result = ProbeResult(
        top1=final["top1"], top5=final["top5"], top5_k=min(TOP_K, int(num_classes)),
        loss=final["loss"], train_loss=train_final["loss"], train_top1=train_final["top1"],
        best_top1=best_top1, best_epoch=best_epoch, epochs=len(history), drops=len(drop_epochs),
        drop_epochs=drop_epochs, stopped_on_plateau=stopped_on_plateau,
        final_learning_rate=readout.learning_rate, history=history, seconds=seconds)
    return readout, result


