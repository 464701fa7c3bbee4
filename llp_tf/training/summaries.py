"""The run's TensorBoard record: a ``train`` and a ``validation`` run, and the
run's settings for the HParams dashboard.

Under ``tensorboard/``, ``train/`` holds each loop's mean training metrics
and the learning rate, ``validation/`` each evaluation's metrics, both by
global step and under plain names (``loss``, ``top1``), as Keras writes its
``train/`` and ``validation/`` runs: TensorBoard draws a name both runs have
(``categorisation``) in one chart. The directory itself holds the settings
the run started with (`write_hparams`), so the HParams dashboard lists runs
by their settings and validation metrics.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api

TRAIN_RUN = "train"
VALIDATION_RUN = "validation"


def make_writers(tensorboard_dir: str, chief: bool
                 ) -> tuple[tf.summary.SummaryWriter, tf.summary.SummaryWriter]:
    """(train, validation) writers in ``tensorboard_dir``; writers that write
    nothing on a worker other than the chief."""
    if not chief:
        return tf.summary.create_noop_writer(), tf.summary.create_noop_writer()
    return tuple(tf.summary.create_file_writer(os.path.join(tensorboard_dir, run))
                 for run in (TRAIN_RUN, VALIDATION_RUN))


def hparam_values(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings (flag name -> value) as HParams values: lists as
    comma-separated strings (``"194,239"``), unset ones left out."""
    return {name: ",".join(str(v) for v in value) if isinstance(value, (tuple, list)) else value
            for name, value in settings.items() if value is not None}


def write_hparams(tensorboard_dir: str, settings: Mapping[str, Any]) -> None:
    """Records ``settings`` (flag name -> value) in ``tensorboard_dir`` for the
    HParams dashboard."""
    writer = tf.summary.create_file_writer(tensorboard_dir)
    with writer.as_default():
        hparams_api.hparams(hparam_values(settings))
    writer.close()
