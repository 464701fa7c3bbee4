"""No method's schedule is a fixed step count that a short run never reaches:
built for the demo's length (flags/demo.flags: 64 epochs of 4,000 / 128 = 31
steps), every ramp ends inside the run and every EMA horizon stays a small
share of it."""

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
#: The largest share of a run an EMA may average over: the releases keep theirs under 1%
#: (CuriousAI/mean-teacher, google-research/fixmatch); a 100-step horizon is 5% of the demo.
SMALL_SHARE = 0.1


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


@pytest.mark.parametrize("name", list(METHODS))
def test_at_the_demos_length_each_ramp_ends_and_each_horizon_is_a_small_share(tmp_path, name):
    flags = _demo_flags()
    epochs, batch = int(flags["epochs"]), int(flags["global_batch_size"])
    total_steps = epochs * (DEMO_USED // batch)
    assert total_steps == 1984
    config = tiny_config(tmp_path, "digits", method=name, epochs=epochs, global_batch_size=batch,
                         warmup_epochs=int(flags["warmup_epochs"]), embedding_dim=16,
                         width=0.125, architecture="resnet10", small_inputs=True, image_size=8)
    strategy = tf.distribute.get_strategy()
    model, optimizer = tiny_model(strategy)
    split = TrainingSplit(np.arange(DEMO_LABELLED), np.arange(DEMO_USED),
                          np.arange(DEMO_LABELLED) % C)
    method = method_class(name).from_config(config, strategy, model, optimizer, C, split)
    if name == "mean_teacher":
        assert 0 < method.rampup_steps < total_steps
        assert method.ema_decay == 0.99  # the releases' value, kept
        assert 1 / (1 - method.ema_decay) <= SMALL_SHARE * total_steps
    elif name == "pseudo_label":
        assert 0 <= method.ramp_start_epoch <= method.ramp_end_epoch < epochs
    elif name == "llp":
        assert 0 < method.warmup_epochs < epochs
    else:
        # supervised and FixMatch: no ramp, no moving average.
        assert not [field.name for field in dataclasses.fields(method_class(name).Settings)
                    if any(word in field.name for word in ("ramp", "decay", "warmup"))]
