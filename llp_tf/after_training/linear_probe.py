"""Linear probe: a linear readout trained on a frozen trunk's pooled features.

The paper's transfer protocol (Places205): freeze the trained network, train
a linear classifier on the pooled features (before both heads) with softmax
cross-entropy and SGD from lr 0.01, dropping the rate x0.1 whenever
validation top-1 saturates (two drops), and report validation top-1 of a
single centre crop.

Because the trunk is frozen and evaluation uses one centre crop, every
image's features are fixed: they are computed once per split with the
evaluation preprocessing (`pipeline.make_eval_input_fn`, padding masked
out) and the readout is trained on the cached [N, F] arrays, so a probe
runs on a CPU in seconds to minutes. The paper does not say whether the
readout's training images were augmented; here they are not (one centre
crop each). The cache lives in memory: N x F x 4 bytes (Places205 with
ResNet-50: 2.45M x 2048, about 20 GB).

Training of the readout (`train_readout`):

- ``keras.layers.Dense(C)`` with zero-initialised weights (the problem is
  convex, so no random initialisation is needed and only the batch order
  depends on the seed);
- SGD with momentum 0.9 (the paper names SGD and lr 0.01 only; 0.9 is the
  momentum of its network training, and without momentum lr 0.01 moves a
  readout ten times slower), no weight decay (none is stated);
- after every epoch, validation top-1 goes to a `schedule.PlateauTracker`:
  ``patience`` epochs without a new best drop the rate by ``drop_factor``;
  once ``max_drops`` drops are taken, the next plateau ends training (the
  readout has saturated at its last rate), otherwise ``epochs`` ends it;
- the batch order of epoch e is ``numpy.random.default_rng([seed, e])``'s
  permutation, so a probe is deterministic given its seed.

The reported top-1 / top-5 are those of the final readout (as the paper
reports the end of training); the best epoch's top-1 is recorded as well.

Standardisation (``ProbeSettings.standardize``, off by default as in the
paper): each feature is shifted and scaled by the training split's mean and
standard deviation. The readout stays linear (an affine map of the features
folds into the Dense layer), so the classifiers it can express are the same;
only SGD's conditioning changes. Pooled ReLU features have large means and
small spreads, so on raw features SGD at lr 0.01 is slow and the plateau
rule stops it underfitted (training top-1 no higher than validation's). On
the demo run (LLP on mnist5k, 1% labels), probing digits, raw features gave
86.5 / 91.3 / 92.1% top-1 with patience 5 / 10 / 20 and a random trunk
16 / 40 / 69%, while standardised ones gave 94.9-95.2% and 94.9% whatever the
patience; probing mnist5k (patience 10): raw 93.7% vs random 46.5%,
standardised 96.2% vs 78.3%. Use it when the numbers must measure the
features rather than the optimisation (small datasets, random-trunk
contrasts).

The contrast baseline is the same probe on a randomly initialised trunk of
the same architecture (`random_trunk_model`).
"""

import dataclasses
import math
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from llp_tf.data import TRAIN, VALIDATION, data_errors, pipeline
from llp_tf.errors import ConfigError
from llp_tf.models import build_model_from_config
from llp_tf.training.progress import EpochProgress, is_interactive
from llp_tf.training.schedule import PlateauTracker

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
#: The project's global batch (the paper's 128).
DEFAULT_BATCH_SIZE = 128
#: Smallest improvement of validation top-1 that counts as a new best.
PLATEAU_MIN_DELTA = 1e-4
#: top-k of the second reported accuracy (capped at C).
TOP_K = 5
#: Floor of a feature's standard deviation when standardising (a constant
#: feature, e.g. a dead ReLU channel, is then left at 0 instead of NaN).
STANDARDIZE_EPSILON = 1e-6
#: Features per forward pass of the readout when evaluating: bounds the
#: memory of the logits ([B, C] floats), nothing else depends on it.
EVALUATION_BATCH_SIZE = 4096
#: Plain progress lines at most this often when output is not a terminal.
LOG_EVERY_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class FeatureSet:
    """Pooled features of one split, in index order.

    Attributes:
      features: float32 [N, F].
      labels: int64 [N], true classes.
      index: int64 [N], the examples' stable indices (sorted).
    """

    features: np.ndarray
    labels: np.ndarray
    index: np.ndarray


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
    drop_epochs: list
    stopped_on_plateau: bool
    final_learning_rate: float
    history: list
    seconds: float

    def to_json(self):
        return dataclasses.asdict(self)


def _log(stream, message):
    stream.write(message + "\n")
    stream.flush()


# -- features ------------------------------------------------------------------


def extract_features(model, source, split, image_size, batch_size=DEFAULT_BATCH_SIZE,
                     stream=None):
    """Pooled features of every example of a split, with the evaluation preprocessing.

    Args:
      model: `LLPModel`; called with ``training=False`` (frozen: batch norm
        uses its moving statistics and nothing is updated).
      source: `llp_tf.data.Source`.
      split: "train" or "validation".
      image_size: int, side of the centre crop (the run's image size).
      batch_size: int, images per forward pass.
      stream: where progress goes (stdout when None).

    Returns:
      `FeatureSet` in index order.

    Raises:
      DataError: the split is missing or an image cannot be decoded.
    """
    num_examples = source.info.num_examples(split)
    dataset = pipeline.make_eval_input_fn(source, batch_size, image_size, split=split)(None)
    steps = pipeline.eval_steps(num_examples, batch_size)

    @tf.function
    def pooled(images):
        return model(images, training=False)["features"]

    progress = EpochProgress(f"features of {source.info.name} {split}", steps, batch_size,
                             stream=stream, log_every_seconds=LOG_EVERY_SECONDS)
    features, labels, index = [], [], []
    with data_errors():
        for step, batch in enumerate(dataset, start=1):
            mask = batch["mask"].numpy()
            features.append(pooled(batch["image"]).numpy()[mask])
            labels.append(batch["label"].numpy()[mask])
            index.append(batch["index"].numpy()[mask])
            progress.update(step, {})
    features = np.concatenate(features).astype(np.float32)
    labels = np.concatenate(labels).astype(np.int64)
    index = np.concatenate(index).astype(np.int64)
    # The evaluation order interleaves shards; index order makes the cache
    # independent of the source's storage layout.
    order = np.argsort(index, kind="stable")
    return FeatureSet(features[order], labels[order], index[order])


def standardizer(train_features):
    """Per-feature (mean, scale) of the training features, float32 [F] each.

    Apply as ``(features - mean) / scale``; ``scale`` is the standard
    deviation floored at `STANDARDIZE_EPSILON`.
    """
    values = np.asarray(train_features, np.float64)
    return (values.mean(axis=0).astype(np.float32),
            np.maximum(values.std(axis=0), STANDARDIZE_EPSILON).astype(np.float32))


# -- readout -------------------------------------------------------------------


class LinearReadout:
    """``keras.layers.Dense(C)`` on features [B, F], trained with SGD on softmax
    cross-entropy.

    Args:
      feature_dim: int F.
      num_classes: int C.
      learning_rate: float, initial rate.
      momentum: float.
    """

    def __init__(self, feature_dim, num_classes, learning_rate=DEFAULT_LEARNING_RATE,
                 momentum=DEFAULT_MOMENTUM):
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
    def learning_rate(self):
        return float(self.optimizer.learning_rate.numpy())

    @learning_rate.setter
    def learning_rate(self, value):
        self.optimizer.learning_rate.assign(value)

    def weights(self):
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

    def train_epoch(self, features, labels, order, batch_size):
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

    def evaluate(self, features, labels, batch_size=None):
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


def train_readout(train, validation, num_classes, settings=ProbeSettings(), stream=None,
                  description="readout"):
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
    _check_feature_sets(train, validation, num_classes)
    train_features, validation_features = train.features, validation.features
    if settings.standardize:
        mean, scale = standardizer(train_features)
        train_features = (train_features - mean) / scale
        validation_features = (validation_features - mean) / scale
    train_labels, validation_labels = train.labels, validation.labels

    readout = LinearReadout(train_features.shape[1], num_classes, settings.learning_rate,
                            settings.momentum)
    tracker = PlateauTracker(settings.patience, min_delta=PLATEAU_MIN_DELTA)
    progress = EpochProgress(description, settings.epochs, len(train_labels), stream=stream,
                             log_every_seconds=LOG_EVERY_SECONDS)
    interactive = is_interactive(stream)
    history, drop_epochs = [], []
    best_top1, best_epoch, stopped_on_plateau = -1.0, 0, False
    start = time.monotonic()
    for epoch in range(1, settings.epochs + 1):
        order = np.random.default_rng([settings.seed, epoch]).permutation(len(train_labels))
        learning_rate = readout.learning_rate
        loss = readout.train_epoch(train_features, train_labels, order, settings.batch_size)
        if not math.isfinite(loss):
            raise ConfigError(
                f"The {description} diverged in epoch {epoch} (loss {loss}) at learning rate "
                f"{learning_rate:g}; lower --learning_rate or standardise the features "
                "(--standardize).")
        metrics = readout.evaluate(validation_features, validation_labels)
        history.append({"epoch": epoch, "learning_rate": learning_rate, "loss": loss,
                        "top1": metrics["top1"], "top5": metrics["top5"]})
        if metrics["top1"] > best_top1:
            best_top1, best_epoch = metrics["top1"], epoch
        progress.update(epoch, {"lr": learning_rate, "loss": loss, "val_top1": metrics["top1"]})
        if tracker.update(metrics["top1"]):
            note = None
            if len(drop_epochs) < settings.max_drops:
                readout.learning_rate = learning_rate * settings.drop_factor
                drop_epochs.append(epoch)
                note = (f"{description}: validation top-1 saturated after epoch {epoch}; "
                        f"learning rate {learning_rate:g} -> {readout.learning_rate:g}")
            else:
                stopped_on_plateau = True
                note = (f"{description}: validation top-1 saturated after epoch {epoch} at the "
                        f"last rate; stopping")
            _log(stream, ("\n" if interactive and epoch < settings.epochs else "") + note)
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


# -- trunks --------------------------------------------------------------------


def random_trunk_model(config, num_classes, seed):
    """An unrestored `LLPModel` of a run's architecture, initialised from ``seed``.

    Sets Keras's global random seed (`keras.utils.set_random_seed`), which the
    initialisers draw from, so the same seed gives the same weights. Its
    batch-norm moving statistics are the initial ones (mean 0, variance 1).
    """
    keras.utils.set_random_seed(int(seed))
    return build_model_from_config(config.model, int(num_classes), config.data.image_size)


#: The checkpoint key of the category head's bias, whose length is the run's C.
def probe_trunk(model, source, image_size, settings=ProbeSettings(), feature_batch_size=None,
                stream=None, description="readout"):
    """Features of both splits of ``source`` from a frozen model, then `train_readout`.

    Args:
      model: `LLPModel`.
      source: `llp_tf.data.Source` with train and validation splits; C is its
        number of classes (independent of the model's).
      image_size: int, the run's image size.
      settings: `ProbeSettings`.
      feature_batch_size: int, images per forward pass; ``settings.batch_size``
        when None.
      stream: progress (stdout when None).
      description: str for progress lines.

    Returns:
      (`ProbeResult`, dict of extraction facts: feature_dim, num_train,
      num_validation, extraction_seconds).
    """
    batch = feature_batch_size or settings.batch_size
    start = time.monotonic()
    train = extract_features(model, source, TRAIN, image_size, batch, stream)
    validation = extract_features(model, source, VALIDATION, image_size, batch, stream)
    extraction_seconds = time.monotonic() - start
    _, result = train_readout(train, validation, source.info.num_classes, settings, stream,
                              description)
    facts = {"feature_dim": int(train.features.shape[1]), "num_train": len(train.labels),
             "num_validation": len(validation.labels),
             "extraction_seconds": extraction_seconds}
    return result, facts
