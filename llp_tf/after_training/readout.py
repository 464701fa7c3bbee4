"""The linear readout of the probe, its settings and its result.

See `llp_tf.after_training.linear_probe` for the protocol: zero-initialised
``Dense(C)``, SGD with momentum, drops on validation plateaus, a batch order
seeded by (seed, epoch). `readout_training` trains it on cached features,
`online_readout` through the frozen trunk (the paper's protocol).
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from llp_tf.after_training.features import DEFAULT_BATCH_SIZE
from llp_tf.errors import ConfigError
from llp_tf.types import Array, FloatTensor, IntTensor

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
#: How the readout is trained: on cached centre-crop features, or online
#: through the frozen trunk on augmented images (the paper's protocol).
PROTOCOLS = ("cached", "online")


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
        the paper; off by default; cached protocol only).
      protocol: "cached" (train on the features of one centre crop per
        image, computed once) or "online" (the paper's: every step through
        the frozen trunk on freshly augmented images).
      max_train_examples: int > 0 or None; use at most this many training
        examples, a uniform draw given ``seed`` (`features.subsample_index`).
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
    """Outcome of one readout training.

    Attributes:
      top1, top5: float, validation accuracies of the final readout; top5 is
        top-k with k = min(5, C) (``top5_k``).
      loss: float, mean validation cross-entropy of the final readout.
      train_loss, train_top1: float; cached protocol: of the final readout
        on the training features; online protocol: means over the last
        epoch's (augmented) training batches, each before its step.
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


class LinearReadout:
    """``keras.layers.Dense(C)`` on features [B, F], trained with SGD on softmax
    cross-entropy.

    Args:
      feature_dim: int F.
      num_classes: int C.
      learning_rate: float, initial rate.
      momentum: float.
      standardization: optional (mean, scale), float32 [F] each
        (`feature_statistics.standardizer`): every batch of features is
        replaced by ``(features - mean) / scale`` (in float32) before the
        Dense layer, so its weights are those of standardised features.
    """

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
        """One SGD step on a batch: features float32 [B, F], labels int64 [B].

        Returns:
          (float mean cross-entropy, float number of top-1 hits), both of the
          weights before the step.
        """
        loss, correct = self._train_step(features, labels)
        return float(loss), float(correct)

    def train_epoch(self, features: Array, labels: Array, order: Array, batch_size: int,
                    on_step: Callable[[int, float], None] | None = None) -> float:
        """One pass of SGD steps over ``features[order]`` in batches.

        Each batch's rows are read in ascending order (fewer, longer reads of
        a cache file); its step does not depend on the order of its rows.

        Args:
          features: float32 [N, F], an array or `NpyRows`; labels: int64 [N];
            order: int [N].
          batch_size: int; the last batch may be smaller.
          on_step: optional callable(steps done, mean loss so far), for progress.

        Returns:
          float, the mean of the steps' batch losses (before each step).
        """
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
