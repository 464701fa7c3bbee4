"""The probe's linear readout (``Dense(C)``, zero-initialised, SGD with momentum on softmax
cross-entropy), its settings and result, and its training: `run_epochs`, the plateau-drop
loop both protocols share, and `train_readout` on cached features."""

import dataclasses
import math
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import keras
import numpy as np
import tensorflow as tf

from llp_tf.after_training.features import DEFAULT_BATCH_SIZE, LOG_EVERY_SECONDS, FeatureSet
from llp_tf.after_training.probe.feature_statistics import all_finite, standardizer
from llp_tf.errors import ConfigError
from llp_tf.training.progress import EpochProgress
from llp_tf.training.schedule import PlateauTracker
from llp_tf.tensor_types import Array, FloatTensor, IntTensor

#: The paper's initial learning rate of the Places205 readout.
DEFAULT_LEARNING_RATE = 0.01
#: The paper's network training's; for the readout it names only SGD and lr 0.01.
DEFAULT_MOMENTUM = 0.9
#: x0.1 per drop and two drops, as in the paper's Places205 readout.
DEFAULT_DROP_FACTOR = 0.1
DEFAULT_MAX_DROPS = 2
#: Epochs without a new best val_top1 before a drop (the paper: "when validation saturates").
DEFAULT_PATIENCE = 10
DEFAULT_EPOCHS = 100
PLATEAU_MIN_DELTA = 1e-4
TOP_K = 5
EVALUATION_BATCH_SIZE = 4096
PROTOCOLS = ("cached", "online")


@dataclasses.dataclass(frozen=True)
class ProbeSettings:
    """How the readout is trained (the flags of tools/linear_probe.py); ConfigError when a
    value is out of range. ``standardize`` is not in the paper (cached protocol only)."""

    epochs: int = DEFAULT_EPOCHS
    batch_size: int = DEFAULT_BATCH_SIZE
    learning_rate: float = DEFAULT_LEARNING_RATE
    momentum: float = DEFAULT_MOMENTUM
    patience: int = DEFAULT_PATIENCE
    max_drops: int = DEFAULT_MAX_DROPS
    drop_factor: float = DEFAULT_DROP_FACTOR
    seed: int = 0
    standardize: bool = False
    protocol: str = "cached"
    max_train_examples: int | None = None

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
        if self.max_train_examples is not None and (
                not _is_int(self.max_train_examples) or self.max_train_examples <= 0):
            problems.append(f"max_train_examples must be a positive integer or unset (got "
                            f"{self.max_train_examples!r})")
        if self.protocol not in PROTOCOLS:
            problems.append(f"protocol must be one of {', '.join(PROTOCOLS)} (got "
                            f"{self.protocol!r})")
        elif self.protocol == "online" and self.standardize:
            problems.append("standardize applies to the cached protocol only (the online "
                            "protocol trains on the trunk's raw features, as the paper does)")
        if problems:
            raise ConfigError("Invalid linear-probe settings: " + "; ".join(problems) + ".")


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


@dataclasses.dataclass
class ProbeResult:
    """Outcome of one readout training, named by the rule of `llp_tf.training.metrics`;
    accuracies are fractions of the final readout, val_top5 is top-``top5_k`` (min(5, C)).
    ``loss`` and ``top1`` are on the training examples (online protocol: means over the last
    epoch's batches, each before its step)."""

    val_top1: float
    val_top5: float
    top5_k: int
    val_loss: float
    loss: float
    top1: float
    best_val_top1: float
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


class LinearReadout:
    """``keras.layers.Dense(C)`` on features float32 [B, F], trained with SGD on softmax
    cross-entropy; with ``standardization`` (mean, scale float32 [F]) it reads
    ``(features - mean) / scale``."""

    def __init__(self, feature_dim: int, num_classes: int,
                 learning_rate: float = DEFAULT_LEARNING_RATE,
                 momentum: float = DEFAULT_MOMENTUM,
                 standardization: tuple[Array, Array] | None = None) -> None:
        self.num_classes = int(num_classes)
        self.dense = keras.layers.Dense(self.num_classes, kernel_initializer="zeros",
                                        bias_initializer="zeros", name="linear_readout")
        self.dense.build((None, int(feature_dim)))
        self.optimizer = keras.optimizers.SGD(learning_rate=learning_rate, momentum=momentum)
        self.optimizer.build(self.dense.trainable_variables)
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self._standardization = None if standardization is None else tuple(
            tf.constant(np.asarray(value, np.float32)) for value in standardization)
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

    def _logits(self, features):
        if self._standardization is not None:
            mean, scale = self._standardization
            features = (features - mean) / scale
        return self.dense(features)

    def _step(self, features, labels):
        with tf.GradientTape() as tape:
            logits = self._logits(features)
            loss = self._loss(labels, logits)
        variables = self.dense.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        correct = tf.equal(tf.argmax(logits, axis=1, output_type=tf.int64), labels)
        return loss, tf.reduce_sum(tf.cast(correct, tf.float32))

    def _stats(self, features, labels):
        logits = self._logits(features)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        top1 = tf.equal(tf.argmax(logits, axis=1, output_type=tf.int64), labels)
        topk = tf.math.in_top_k(labels, logits, min(TOP_K, self.num_classes))
        return (tf.reduce_sum(losses), tf.reduce_sum(tf.cast(top1, tf.float32)),
                tf.reduce_sum(tf.cast(topk, tf.float32)))

    def train_step(self, features: FloatTensor, labels: IntTensor) -> tuple[float, float]:
        """(mean cross-entropy, top-1 hits) of one SGD step on features float32 [B, F] and
        labels int64 [B], both of the weights before the step."""
        loss, correct = self._train_step(features, labels)
        return float(loss), float(correct)

    def train_epoch(self, features: Array, labels: Array, order: Array, batch_size: int,
                    on_step: Callable[[int, float], None] | None = None) -> float:
        """The mean batch loss of one pass of SGD steps over ``features[order]`` (float32
        [N, F], an array or `NpyRows`; labels int64 [N]); ``on_step(steps, mean loss)``."""
        losses = []
        for start in range(0, len(order), batch_size):
            rows = np.sort(order[start:start + batch_size])
            losses.append(self.train_step(features[rows], labels[rows])[0])
            if on_step is not None:
                on_step(len(losses), float(np.mean(losses)))
        return float(np.mean(losses))

    def evaluate(self, features: Array, labels: Array,
                 batch_size: int | None = None) -> dict[str, float]:
        """dict loss (mean cross-entropy), top1, top5 over all the examples,
        reading ``features`` (array or `NpyRows`) ``batch_size`` rows at a time."""
        batch_size = batch_size or EVALUATION_BATCH_SIZE
        totals = np.zeros(3)
        for start in range(0, len(labels), batch_size):
            batch = self._batch_stats(features[start:start + batch_size],
                                      labels[start:start + batch_size])
            totals += [float(value) for value in batch]
        count = max(len(labels), 1)
        return {"loss": totals[0] / count, "top1": totals[1] / count, "top5": totals[2] / count}


#: ``epoch_fn(epoch, on_step) -> mean training loss`` of one epoch (1-based).
EpochFn = Callable[[int, Callable[[int, float], None]], float]


@dataclasses.dataclass
class EpochRecord:
    """What `run_epochs` saw (see `ProbeResult` for the fields' meaning)."""

    history: list[dict[str, float]]
    drop_epochs: list[int]
    best_val_top1: float
    best_epoch: int
    stopped_on_plateau: bool
    seconds: float


def check_features(features: FeatureSet, num_classes: int, name: str) -> None:
    """ConfigError unless ``features`` has examples, labels in [0, C) and, for an
    in-memory array, finite values (a cache's are checked when it is written)."""
    if len(features.labels) == 0:
        raise ConfigError(f"The {name} split has no examples to probe with.")
    if features.labels.min() < 0 or features.labels.max() >= num_classes:
        raise ConfigError(f"The {name} labels must lie in [0, {num_classes}).")
    if isinstance(features.features, np.ndarray) and not all_finite(features.features):
        raise ConfigError(f"The {name} features contain NaN or infinite values; the "
                          "trunk's checkpoint is broken or diverged.")


def _check_feature_sets(train, validation, num_classes):
    if train.features.ndim != 2 or validation.features.ndim != 2 or \
            train.features.shape[1] != validation.features.shape[1]:
        raise ConfigError(f"Training and validation features must both be [N, F] with the same "
                          f"F; got {train.features.shape} and {validation.features.shape}.")
    check_features(train, num_classes, "training")
    check_features(validation, num_classes, "validation")


def _on_plateau(readout, settings, drop_epochs, epoch):
    """Drops the rate after a plateau (not after the last epoch); True: every drop taken."""
    if len(drop_epochs) >= settings.max_drops:
        return True
    if epoch < settings.epochs:
        readout.learning_rate = readout.learning_rate * settings.drop_factor
        drop_epochs.append(epoch)
    return False


def _check_finite(loss, description, epoch, learning_rate):
    if not math.isfinite(loss):
        raise ConfigError(
            f"The {description} diverged in epoch {epoch} (loss {loss}) at learning rate "
            f"{learning_rate:g}; lower --learning_rate or standardise the features "
            "(--standardize).")


def run_epochs(readout: LinearReadout, settings: ProbeSettings, steps_per_epoch: int,
               epoch_fn: EpochFn, validation: FeatureSet, stream: TextIO,
               description: str) -> EpochRecord:
    """Trains ``readout`` epoch by epoch with ``epoch_fn``, a progress bar on ``stream``:
    ``patience`` epochs without a new best val_top1 drop the rate by ``drop_factor``; after
    ``max_drops`` drops the next plateau stops, else ``settings.epochs`` does."""
    tracker = PlateauTracker(settings.patience, min_delta=PLATEAU_MIN_DELTA)
    record = EpochRecord([], [], -1.0, 0, False, 0.0)
    start = time.monotonic()
    progress = EpochProgress(description, settings.epochs * steps_per_epoch,
                             settings.batch_size, stream=stream,
                             log_every_seconds=LOG_EVERY_SECONDS)
    for epoch in range(1, settings.epochs + 1):
        learning_rate = readout.learning_rate
        progress.description = f"{description} epoch {epoch}/{settings.epochs}"
        steps_before = (epoch - 1) * steps_per_epoch

        def on_step(step, loss, steps_before=steps_before, learning_rate=learning_rate):
            if step < steps_per_epoch:
                progress.update(steps_before + step, {"learning_rate": learning_rate,
                                                      "loss": loss})

        loss = epoch_fn(epoch, on_step)
        _check_finite(loss, description, epoch, learning_rate)
        metrics = readout.evaluate(validation.features, validation.labels)
        record.history.append({"epoch": epoch, "learning_rate": learning_rate, "loss": loss,
                               "val_top1": metrics["top1"], "val_top5": metrics["top5"]})
        if metrics["top1"] > record.best_val_top1:
            record.best_val_top1, record.best_epoch = metrics["top1"], epoch
        if tracker.update(metrics["top1"]):
            record.stopped_on_plateau = _on_plateau(readout, settings, record.drop_epochs, epoch)
        if record.stopped_on_plateau:
            progress.total_steps = steps_before + steps_per_epoch
        progress.update(steps_before + steps_per_epoch, {
            "learning_rate": learning_rate, "loss": loss, "val_top1": metrics["top1"]})
        if record.stopped_on_plateau:
            break
    record.seconds = time.monotonic() - start
    return record


def probe_result(readout: LinearReadout, record: EpochRecord, validation: FeatureSet,
                 train_metrics: dict[str, float], num_classes: int) -> ProbeResult:
    """The `ProbeResult` of a trained readout: validation metrics of its final
    weights, ``train_metrics`` (dict loss, top1) and the epochs' record."""
    final = readout.evaluate(validation.features, validation.labels)
    return ProbeResult(
        val_top1=final["top1"], val_top5=final["top5"], top5_k=min(TOP_K, int(num_classes)),
        val_loss=final["loss"], loss=train_metrics["loss"], top1=train_metrics["top1"],
        best_val_top1=record.best_val_top1, best_epoch=record.best_epoch,
        epochs=len(record.history),
        drops=len(record.drop_epochs), drop_epochs=record.drop_epochs,
        stopped_on_plateau=record.stopped_on_plateau,
        final_learning_rate=readout.learning_rate, history=record.history,
        seconds=record.seconds)


def train_readout(train: FeatureSet, validation: FeatureSet, num_classes: int,
                  settings: ProbeSettings = ProbeSettings(), stream: TextIO | None = None,
                  description: str = "readout") -> tuple[LinearReadout, ProbeResult]:
    """(`LinearReadout`, `ProbeResult`) of a readout trained on every row of ``train``
    (features float32 [N, F], arrays or `NpyRows`, read a batch at a time; epoch e in
    ``default_rng([seed, e])``'s order). ConfigError: bad feature sets, or divergence."""
    stream = stream or sys.stdout
    _check_feature_sets(train, validation, num_classes)
    standardization = standardizer(train.features) if settings.standardize else None
    readout = LinearReadout(train.features.shape[1], num_classes, settings.learning_rate,
                            settings.momentum, standardization)
    num_train = len(train.labels)

    def epoch_fn(epoch, on_step):
        order = np.random.default_rng([settings.seed, epoch]).permutation(num_train)
        return readout.train_epoch(train.features, train.labels, order, settings.batch_size,
                                   on_step)

    record = run_epochs(readout, settings, -(-num_train // settings.batch_size), epoch_fn,
                        validation, stream, description)
    train_metrics = readout.evaluate(train.features, train.labels)
    return readout, probe_result(readout, record, validation, train_metrics, num_classes)
