"""The baselines' recipes: each source's learning-rate schedule against its formula in float64
(as a share of the run), its weight-decay form and the EMA rule at the source's own length."""

import math

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.training.methods import recipes

PROGRESS = [0.0, 0.01, 1 / 60, 0.03, 0.2, 1 / 6, 0.5, 0.74, 0.999]


def _factor(name, base):
    return [float(recipes.SCHEDULES[name](tf.constant(p, tf.float64), base)) for p in PROGRESS]


def test_the_cifar_codes_cosine():
    """libml: lr * cos(7 pi step / (16 total))."""
    want = [math.cos(7 * math.pi * p / 16) for p in PROGRESS]
    np.testing.assert_allclose(_factor("cosine_7_16", 0.03), want, rtol=1e-12)


def test_curiousais_imagenet_schedule_on_its_60_epochs():
    """pytorch/main.py adjust_learning_rate at epoch e = 60 p: linear from initial_lr 0.1 to lr
    over lr_rampup 2 epochs, times cosine_rampdown(e, 75)."""
    base = 0.025 * 128 / 40
    want = []
    for p in PROGRESS:
        epoch = 60 * p
        rate = (epoch / 2 if epoch < 2 else 1.0) * (base - 0.1) + 0.1
        want.append(rate * 0.5 * (np.cos(np.pi * epoch / 75) + 1) / base)
    np.testing.assert_allclose(_factor("mt_imagenet", base), want, rtol=1e-12)
    assert recipes.mt_imagenet(128).learning_rate == pytest.approx(base, rel=1e-15)


def test_fixmatch_imagenet_warm_up_and_steps_on_its_3000_epochs():
    """imagenet/utils/learning_rate.py with the README's warmup_epochs 50 and decay_epochs 500
    of 3,000: lr_epoch / 50 during the warm-up, then 0.1 ** floor(lr_epoch / 500)."""
    want = []
    for p in PROGRESS:
        epoch = 3000 * p
        want.append(epoch / 50 if epoch < 50 else 0.1 ** (epoch // 500))
    np.testing.assert_allclose(_factor("fixmatch_imagenet", 0.1), want, rtol=1e-12)


def test_each_recipes_weight_decay_in_its_sources_form():
    """Coefficient of sum(l2_loss) = sum w^2 / 2: libml's wd * l2_loss (5e-4) over kernels;
    Keras l2(3e-4) = 3e-4 * sum w^2 over kernels and the dense bias; PyTorch's coupled 5e-5 on
    every parameter (its gradient wd * w)."""
    cifar = recipes.cifar_code("fixmatch.py")
    assert (cifar.weight_decay, cifar.decayed, cifar.nesterov) == (5e-4, "kernels", True)
    fixmatch = recipes.fixmatch_imagenet(256)
    assert (fixmatch.weight_decay, fixmatch.decayed) == (6e-4, "not_batch_norm")
    assert fixmatch.learning_rate == pytest.approx(0.1, rel=1e-15)
    mean_teacher = recipes.mt_imagenet(40)
    assert (mean_teacher.weight_decay, mean_teacher.decayed) == (5e-5, "trainable")
    assert (cifar.averaged, fixmatch.averaged, mean_teacher.averaged) == (
        "trainable", "all", "own_statistics")


def test_at_its_sources_length_each_horizon_gives_the_sources_decay():
    cases = [(recipes.cifar_code("pseudo_label.py"), 2 ** 20, 0.999),
             (recipes.fixmatch_imagenet(256), 3000 * 500, 0.999),
             (recipes.mt_imagenet(400), 60 * 5765, 0.9997)]
    for recipe, steps, decay in cases:
        assert recipes.ema_decay(recipe.ema_horizon, steps) == pytest.approx(decay, rel=1e-12)
    # Half the run, half the horizon: 1 - 1/500.
    assert recipes.ema_decay(cases[0][0].ema_horizon, 2 ** 19) == pytest.approx(0.998,
                                                                              rel=1e-12)
