"""Training the probe's readout: the epoch loop with plateau drops, on cached features.

`run_epochs` is the loop both protocols share: after every epoch, validation
top-1 goes to a `schedule.PlateauTracker`; ``patience`` epochs without a new
best drop the rate by ``drop_factor``, and once ``max_drops`` drops are
taken the next plateau ends training. `train_readout` runs it on cached
features (the default protocol): epoch e visits the training rows in
``numpy.random.default_rng([seed, e])``'s permutation, in batches read from
the cache (an array, or a file read batch by batch), so memory does not grow
with N. `online_readout` runs it through the frozen trunk.
"""

import dataclasses
import math
import sys
import time
from collections.abc import Callable
from typing import TextIO

import numpy as np

from llp_tf.after_training.feature_statistics import all_finite, standardizer
from llp_tf.after_training.features import LOG_EVERY_SECONDS, FeatureSet
from llp_tf.after_training.readout import (PLATEAU_MIN_DELTA, TOP_K, LinearReadout, ProbeResult,
                                           ProbeSettings)
from llp_tf.errors import ConfigError
from llp_tf.training.progress import EpochProgress
from llp_tf.training.schedule import PlateauTracker

#: ``epoch_fn(epoch, on_step) -> mean training loss`` of one epoch (1-based);
#: ``on_step(steps done, mean loss so far)`` reports progress.
EpochFn = Callable[[int, Callable[[int, float], None]], float]


@dataclasses.dataclass
class EpochRecord:
    """What `run_epochs` saw (see `ProbeResult` for the fields' meaning)."""

    history: list[dict[str, float]]
    drop_epochs: list[int]
    best_top1: float
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


def _log(stream, message):
    stream.write(message + "\n")
    stream.flush()


def _on_plateau(readout, settings, drop_epochs, epoch, description, stream):
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
    _log(stream, note)
    return stop


def _check_finite(loss, description, epoch, learning_rate):
    """ConfigError when an epoch's mean loss is not finite: the readout diverged."""
    if not math.isfinite(loss):
        raise ConfigError(
            f"The {description} diverged in epoch {epoch} (loss {loss}) at learning rate "
            f"{learning_rate:g}; lower --learning_rate or standardise the features "
            "(--standardize).")


def run_epochs(readout: LinearReadout, settings: ProbeSettings, steps_per_epoch: int,
               epoch_fn: EpochFn, validation: FeatureSet, stream: TextIO,
               description: str) -> EpochRecord:
    """Trains ``readout`` epoch by epoch with ``epoch_fn`` until the plateau rule
    or ``settings.epochs`` stops it (see the module docstring).

    Each epoch has its own progress bar (plain lines when ``stream`` is not a
    terminal): steps, the running loss, and at its end validation top-1.
    """
    tracker = PlateauTracker(settings.patience, min_delta=PLATEAU_MIN_DELTA)
    record = EpochRecord([], [], -1.0, 0, False, 0.0)
    start = time.monotonic()
    for epoch in range(1, settings.epochs + 1):
        learning_rate = readout.learning_rate
        progress = EpochProgress(f"{description} epoch {epoch}/{settings.epochs}",
                                 steps_per_epoch, settings.batch_size, stream=stream,
                                 log_every_seconds=LOG_EVERY_SECONDS)

        def on_step(step, loss, progress=progress, learning_rate=learning_rate):
            if step < steps_per_epoch:  # the last step is reported with validation
                progress.update(step, {"lr": learning_rate, "loss": loss})

        loss = epoch_fn(epoch, on_step)
        _check_finite(loss, description, epoch, learning_rate)
        metrics = readout.evaluate(validation.features, validation.labels)
        record.history.append({"epoch": epoch, "learning_rate": learning_rate, "loss": loss,
                               "top1": metrics["top1"], "top5": metrics["top5"]})
        if metrics["top1"] > record.best_top1:
            record.best_top1, record.best_epoch = metrics["top1"], epoch
        progress.update(steps_per_epoch, {"lr": learning_rate, "loss": loss,
                                          "val_top1": metrics["top1"]})
        if tracker.update(metrics["top1"]):
            record.stopped_on_plateau = _on_plateau(readout, settings, record.drop_epochs,
                                                    epoch, description, stream)
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
        top1=final["top1"], top5=final["top5"], top5_k=min(TOP_K, int(num_classes)),
        loss=final["loss"], train_loss=train_metrics["loss"], train_top1=train_metrics["top1"],
        best_top1=record.best_top1, best_epoch=record.best_epoch, epochs=len(record.history),
        drops=len(record.drop_epochs), drop_epochs=record.drop_epochs,
        stopped_on_plateau=record.stopped_on_plateau,
        final_learning_rate=readout.learning_rate, history=record.history,
        seconds=record.seconds)


def train_readout(train: FeatureSet, validation: FeatureSet, num_classes: int,
                  settings: ProbeSettings = ProbeSettings(), stream: TextIO | None = None,
                  description: str = "readout") -> tuple[LinearReadout, ProbeResult]:
    """Trains a linear readout on cached features (see the module docstring).

    Args:
      train, validation: `FeatureSet`; features float32 [N, F] as arrays or
        cache rows (`npy_rows.NpyRows`), read a batch at a time.
      num_classes: int C of the probe dataset.
      settings: `ProbeSettings` (``protocol`` and ``max_train_examples`` are
        the caller's business: every training row given is used).
      stream: where progress goes (stdout when None).
      description: str, names the probe in progress lines.

    Returns:
      (`LinearReadout`, `ProbeResult`). With ``settings.standardize`` the
      readout's weights are those of standardised features (see
      `feature_statistics.standardizer`); it standardises what it is given.

    Raises:
      ConfigError: bad feature sets, or the training diverged (non-finite loss).
    """
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
