"""The baselines' published configurations: one source file per method and regime family.

A family (``--baseline_preset``, `llp_tf.training.config.BASELINE_PRESETS`) names where
every value of a baseline comes from:

- ``fixmatch_cifar`` (small data, the default): google-research/fixmatch ``mean_teacher.py``,
  ``pseudo_label.py`` and ``fixmatch.py`` with the ``libml/`` they build on;
- ``imagenet`` (flags/r18_*, r50_*): Mean Teacher from CuriousAI/mean-teacher
  ``pytorch/experiments/imagenet_valid.py`` and ``pytorch/main.py``, FixMatch from
  google-research/fixmatch ``imagenet/fixmatch.py`` (with ``imagenet/training.py``), and
  pseudo-label from ``pseudo_label.py`` (the FixMatch code publishes no ImageNet one).

A `Recipe` is what a method's source fixes beyond its loss: optimiser, learning-rate schedule,
weight decay in its form, and the moving average of the weights. Every schedule is a share of
the run, the one rule that moves a source's schedule to a run of another length: progress
``p = t / S`` (``t`` steps done, ``S`` the run's steps), and an EMA keeps the share of the run
its horizon ``1 / (1 - a)`` had in the source (`ema_decay`). docs/methods.md has the table.
"""

import dataclasses
import math

import tensorflow as tf

#: Which weights carry weight decay: conv and dense kernels (``libml``'s filter on "kernel"),
#: every trainable weight but batch-norm gamma and beta, or every trainable weight.
DECAYED = ("kernels", "not_batch_norm", "trainable")
#: What a moving average of the weights averages: the trainable weights, taking the model's
#: batch-norm statistics (``libml/utils.py model_vars``); every weight, statistics included
#: (``imagenet/utils/ema.py`` over ``model.variables``); the trainable weights, the averaged
#: model keeping batch-norm statistics of its own training passes (PyTorch ``parameters()``).
AVERAGED = ("trainable", "all", "own_statistics")

#: The FixMatch CIFAR code's run: ``train_kimg`` 2^16 kibi-images of 64-image labelled batches.
CIFAR_CODE_STEPS = (1 << 16 << 10) // 64
#: CuriousAI's ImageNet run: 60 epochs of its 1,153,167 unlabelled images (1,281,167 less the
#: 128,000 labelled), 200 of them a step on its 10 GPUs (pytorch/README.md), 5,765 steps each.
MT_IMAGENET_STEPS = 60 * ((1_281_167 - 128_000) // 200)
#: imagenet/fixmatch.py's README run: 3,000 epochs of the 128,116 labelled images at the
#: labelled batch of 256 its learning rate is given at (lr x batch / 256): 500 steps each.
FIXMATCH_IMAGENET_STEPS = 3000 * (128_116 // 256)


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What a baseline's source fixes beyond its loss (see the module docstring).

    Attributes:
      source: the source file, "repository path".
      learning_rate: the base rate at the run's batch (the schedule multiplies it).
      nesterov: Nesterov momentum (0.9 in every source).
      schedule: a `SCHEDULES` name: the factor on the base rate at progress p.
      weight_decay: coefficient of ``sum(tf.nn.l2_loss(w))`` over the `DECAYED` weights (a
        source's ``wd * sum w^2`` is ``2 wd`` here; PyTorch's coupled ``weight_decay`` adds
        ``wd * w`` to the gradient, ``wd`` here).
      decayed: a `DECAYED` value.
      ema_horizon: the average's horizon 1/(1 - a) as a share of the source's run.
      averaged: an `AVERAGED` value.
      warm_start: the average is the plain mean of the weights so far until the EMA weighs
        less (CuriousAI ``update_ema_variables``: a_k = min(1 - 1/(k + 1), a)).
    """

    source: str
    learning_rate: float
    nesterov: bool
    schedule: str
    weight_decay: float
    decayed: str
    ema_horizon: float
    averaged: str
    warm_start: bool = False


def cifar_code(source: str) -> Recipe:
    """The FixMatch CIFAR code's optimiser and average (``mean_teacher.py``, ``pseudo_label.py``
    and ``fixmatch.py`` alike): Nesterov SGD at 0.03 with the cosine ``cos(7 pi p / 16)``,
    ``wd 5e-4 * sum(l2_loss)`` over the kernels, an EMA of 0.999 of the trainable weights."""
    return Recipe(source=f"google-research/fixmatch {source}", learning_rate=0.03,
                  nesterov=True, schedule="cosine_7_16", weight_decay=5e-4, decayed="kernels",
                  ema_horizon=1000 / CIFAR_CODE_STEPS, averaged="trainable")


def mt_imagenet(global_batch_size: int) -> Recipe:
    """CuriousAI's ImageNet Mean Teacher: Nesterov SGD at 0.025 per 40 images, PyTorch's coupled
    weight decay 5e-5 on every parameter, decay 0.9997 over parameters with a true-mean start."""
    return Recipe(source="CuriousAI/mean-teacher pytorch/experiments/imagenet_valid.py",
                  learning_rate=0.025 * global_batch_size / 40, nesterov=True,
                  schedule="mt_imagenet", weight_decay=5e-5, decayed="trainable",
                  ema_horizon=(1 / (1 - 0.9997)) / MT_IMAGENET_STEPS,
                  averaged="own_statistics", warm_start=True)


def fixmatch_imagenet(labelled_batch_size: int) -> Recipe:
    """imagenet/fixmatch.py: Nesterov SGD at 0.1 x labelled batch / 256, warm-up and x0.1 steps,
    Keras ``l2(3e-4)`` (``3e-4 * sum w^2``) on kernels and the dense bias, EMA 0.999 of all."""
    return Recipe(source="google-research/fixmatch imagenet/fixmatch.py",
                  learning_rate=0.1 * labelled_batch_size / 256, nesterov=True,
                  schedule="fixmatch_imagenet", weight_decay=2 * 3e-4, decayed="not_batch_norm",
                  ema_horizon=1000 / FIXMATCH_IMAGENET_STEPS, averaged="all")


def cosine_7_16(progress: tf.Tensor, base: float) -> tf.Tensor:
    """libml's decay: cos(7 pi p / 16) (0.195 at the run's end)."""
    del base
    return tf.cos(7 * math.pi * progress / 16)


def mt_imagenet_schedule(progress: tf.Tensor, base: float) -> tf.Tensor:
    """pytorch/main.py ``adjust_learning_rate`` as a share of the 60-epoch run: linear from 0.1
    to the base over 2 of 60 epochs, times 0.5 (cos(pi e / 75) + 1) at epoch e = 60 p; the
    factor on ``base``."""
    ramp = tf.minimum(progress / (2 / 60), 1.0)
    rate = ramp * (base - 0.1) + 0.1
    return rate * 0.5 * (tf.cos(math.pi * 60 * progress / 75) + 1) / base


def fixmatch_imagenet_schedule(progress: tf.Tensor, base: float) -> tf.Tensor:
    """imagenet/utils/learning_rate.py with the README's 3,000-epoch run: linear from 0 over
    the first 50 epochs, then x0.1 every 500 (staircase), as shares of the run."""
    del base
    warm_up = 50 / 3000
    return tf.where(progress < warm_up, progress / warm_up,
                    tf.pow(tf.constant(0.1, progress.dtype),
                           tf.floor(progress / (500 / 3000))))


def linear_rampup(steps_done: tf.Tensor, rampup_steps: float) -> tf.Tensor:
    """min(1, t / T) for t = ``steps_done`` (float32 []); 1 when T is 0."""
    if rampup_steps <= 0:
        return tf.constant(1.0, tf.float32)
    return tf.cast(tf.clip_by_value(tf.cast(steps_done, tf.float64) / float(rampup_steps),
                                    0.0, 1.0), tf.float32)


def sigmoid_rampup(steps_done: tf.Tensor, rampup_steps: float) -> tf.Tensor:
    """exp(-5 (1 - min(1, t / T))^2) for t = ``steps_done`` (float32 []); 1 when T is 0."""
    if rampup_steps <= 0:
        return tf.constant(1.0, tf.float32)
    remaining = 1.0 - tf.clip_by_value(tf.cast(steps_done, tf.float64) / float(rampup_steps),
                                       0.0, 1.0)
    return tf.cast(tf.exp(-5.0 * remaining * remaining), tf.float32)


#: Learning-rate factor (float64 []) at progress p (float64 [], in [0, 1)), given the base rate.
SCHEDULES = {"cosine_7_16": cosine_7_16, "mt_imagenet": mt_imagenet_schedule,
             "fixmatch_imagenet": fixmatch_imagenet_schedule}


def ema_decay(horizon_share: float, total_steps: int) -> float:
    """The decay whose horizon 1/(1 - a) is ``horizon_share`` of a run of ``total_steps``:
    1 - 1 / (share x steps); 0 (the average is the model) when that is under one step."""
    steps = horizon_share * total_steps
    return 1.0 - 1.0 / steps if steps > 1 else 0.0
