"""No method's schedule is a fixed step count that a short run never reaches:
built for the demo's length (flags/demo.flags: 64 epochs of 4,000 / 128 = 31
steps), every ramp ends inside the run and every EMA horizon is the share of the
run it is in its source (the one rule: docs/methods.md)."""

import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.training.methods import METHODS, TrainingSplit, method_class
from tests.runs import tiny_config
from tests.training.methods.two_streams import C, tiny_model

DEMO_FLAGS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "flags", "demo.flags")
DEMO_USED, DEMO_LABELLED = 4000, 130  # mnist5k's training images, 13 a class labelled
#: The source's horizon 1/(1 - a) over its run's steps, by family: google-research/fixmatch
#: mean_teacher.py, pseudo_label.py and fixmatch.py (--ema 0.999; train_kimg 2^16 kibi-images of
#: 64-image batches); the ImageNet ones in the MT and FixMatch tests.
CIFAR_CODE_SHARE = (1 / (1 - 0.999)) / ((1 << 26) / 64)


def _demo_flags():
    """{flag name: value as written} of flags/demo.flags."""
    with open(DEMO_FLAGS) as f:
        pairs = [line.strip()[2:].split("=", 1) for line in f
                 if line.startswith("--") and "=" in line]
    return dict(pairs)


def test_no_setting_is_a_count_of_steps():
    """Ramps and horizons are shares of the run (or epochs), so they scale with it."""
    for name in METHODS:
        settings = method_class(name).Settings
        for field in dataclasses.fields(settings):
            assert not field.name.endswith("steps"), (name, field.name)


@pytest.fixture(scope="module")
def model_and_optimizer():
    """A `tiny_model` and its optimizer, built once for the module (the methods only read them)."""
    return tiny_model(tf.distribute.get_strategy())


@pytest.mark.parametrize("name", list(METHODS))
def test_at_the_demos_length_each_ramp_ends_and_each_horizon_is_a_small_share(
        tmp_path, name, model_and_optimizer):
    flags = _demo_flags()
    epochs, batch = int(flags["epochs"]), int(flags["global_batch_size"])
    total_steps = epochs * (DEMO_USED // batch)
    assert total_steps == 1984
    config = tiny_config(tmp_path, "digits", method=name, epochs=epochs, global_batch_size=batch,
                         warmup_epochs=int(flags["warmup_epochs"]), embedding_dim=16,
                         width=0.125, architecture="resnet10", small_inputs=True, image_size=8)
    strategy = tf.distribute.get_strategy()
    model, optimizer = model_and_optimizer
    split = TrainingSplit(np.arange(DEMO_LABELLED), np.arange(DEMO_USED),
                          np.arange(DEMO_LABELLED) % C)
    method = method_class(name).from_context(config.method_context(), strategy, model, optimizer, C,
                                              split)
    if name in ("mean_teacher", "pseudo_label", "fixmatch"):
        # 1.18 steps of the demo's 1,240: a = 1 - 1 / 1.18, the teacher all but the student.
        horizon = CIFAR_CODE_SHARE * total_steps
        assert 1 / (1 - method.ema_decay) == pytest.approx(horizon, rel=1e-9)
    if name in ("mean_teacher", "pseudo_label"):
        assert 0 < method.rampup_steps == pytest.approx(0.4 * total_steps, rel=1e-12)
    elif name == "llp":
        assert 0 < method.warmup_epochs < epochs
    elif name == "supervised":
        assert not dataclasses.fields(method_class(name).Settings)
