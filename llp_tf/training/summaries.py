"""The run's TensorBoard record: a ``train`` and a ``validation`` run, and the
run's settings for the HParams dashboard.

Under ``tensorboard/``, ``train/`` holds each loop's mean training metrics,
the learning rate and each evaluation's bank statistics, ``validation/``
each evaluation's validation metrics, all by global step. A metric's tag is
its name (`llp_tf.training.metrics`) without the ``val_`` prefix, which
picks the run instead (`write_scalars`), as Keras's TensorBoard callback
writes its runs: TensorBoard draws ``categorisation`` and
``val_categorisation`` in one chart. The directory itself holds the settings
the run started with (`write_hparams`), so the HParams dashboard lists runs
by their settings and validation metrics.
"""

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
    """The writers of `TRAIN_RUN` and `VALIDATION_RUN` in ``tensorboard_dir``, by
    run name; writers that write nothing on a worker other than the chief."""
    if not chief:
        return {run: tf.summary.create_noop_writer() for run in (TRAIN_RUN, VALIDATION_RUN)}
    return {run: tf.summary.create_file_writer(os.path.join(tensorboard_dir, run))
            for run in (TRAIN_RUN, VALIDATION_RUN)}


def run_and_tag(name: str) -> tuple[str, str]:
    """(run, tag) of the metric ``name``: ``val_top1`` -> (validation, top1),
    ``loss`` -> (train, loss)."""
    if name.startswith(VALIDATION_PREFIX):
        return VALIDATION_RUN, name[len(VALIDATION_PREFIX):]
    return TRAIN_RUN, name


def write_scalars(writers: Mapping[str, tf.summary.SummaryWriter],
                  metrics: Mapping[str, float], step: int) -> None:
    """Writes ``metrics`` (name -> number) at ``step``, each in the run and
    under the tag of `run_and_tag`; ``writers``: run name -> writer."""
    for name, value in metrics.items():
        run, tag = run_and_tag(name)
        with writers[run].as_default(step=step):
            tf.summary.scalar(tag, value)


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
