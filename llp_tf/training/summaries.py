"""The run's TensorBoard record: a ``train`` and a ``validation`` run under ``tensorboard/``,
each metric tagged with its name without ``val_`` (as Keras's TensorBoard callback writes,
so ``categorisation`` and ``val_categorisation`` share a chart), and the settings for the
HParams dashboard."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api

from llp_tf.training.metrics import VALIDATION_PREFIX

TRAIN_RUN = "train"
VALIDATION_RUN = "validation"


def make_writers(tensorboard_dir: str, chief: bool) -> dict[str, tf.summary.SummaryWriter]:
    """Run name -> writer of `TRAIN_RUN` and `VALIDATION_RUN` (writing nothing off the chief)."""
    if not chief:
        return {run: tf.summary.create_noop_writer() for run in (TRAIN_RUN, VALIDATION_RUN)}
    return {run: tf.summary.create_file_writer(os.path.join(tensorboard_dir, run))
            for run in (TRAIN_RUN, VALIDATION_RUN)}


def run_and_tag(name: str) -> tuple[str, str]:
    """``val_top1`` -> (validation, top1), ``loss`` -> (train, loss)."""
    if name.startswith(VALIDATION_PREFIX):
        return VALIDATION_RUN, name[len(VALIDATION_PREFIX):]
    return TRAIN_RUN, name


def write_scalars(writers: Mapping[str, tf.summary.SummaryWriter],
                  metrics: Mapping[str, float], step: int) -> None:
    """Writes ``metrics`` (name -> number) at ``step`` under `run_and_tag`'s run and tag."""
    for name, value in metrics.items():
        run, tag = run_and_tag(name)
        with writers[run].as_default(step=step):
            tf.summary.scalar(tag, value)


def hparam_values(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings as HParams values: lists comma-joined (``"194,239"``), unset ones left out."""
    return {name: ",".join(str(v) for v in value) if isinstance(value, (tuple, list)) else value
            for name, value in settings.items() if value is not None}


def write_hparams(tensorboard_dir: str, settings: Mapping[str, Any]) -> None:
    """Records ``settings`` (flag name -> value) for the HParams dashboard."""
    writer = tf.summary.create_file_writer(tensorboard_dir)
    with writer.as_default():
        hparams_api.hparams(hparam_values(settings))
    writer.close()
