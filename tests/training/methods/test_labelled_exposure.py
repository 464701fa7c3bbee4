"""llp_tf/training/methods/labelled_exposure.py against counts by hand on the demo's sizes:
4,000 used digits, 130 labelled (13 a class), batch 128 (31 steps an epoch), 64 epochs."""

import pytest

from llp_tf.training.methods import METHODS
from llp_tf.training.methods import labelled_exposure as exposure

USED, LABELLED, BATCH, EPOCHS, STEPS = 4000, 130, 128, 64, 64 * 31


def _config(method, **settings):
    return {"method": {"name": method}, "optimization": {"global_batch_size": BATCH},
            "methods": {method: settings}}


@pytest.mark.parametrize("method,settings,passes", [
    # 1,984 steps of 128 labelled images over 130: 1953.5 passes.
    ("supervised", {}, 1984 * 128 / 130),
    # 128 // (1 + 7) = 16 labelled a step.
    ("fixmatch", {"unlabelled_ratio": 7}, 1984 * 16 / 130),
    # 128 // 2 = 64 a step.
    ("mean_teacher", {"unlabelled_ratio": 1}, 1984 * 64 / 130),
    ("pseudo_label", {"unlabelled_ratio": 1}, 1984 * 64 / 130),
    # 54 LLP epochs of 31 steps (after 10 of warm start), 128 x 130 / 4,000 labelled a step:
    # 1,674 x 128 / 4,000 = 53.568 passes.
    ("llp", {"warmup_epochs": 10}, 53.568),
])
def test_passes_over_each_labelled_image(method, settings, passes):
    got = exposure.exposure(_config(method, **settings), STEPS, LABELLED, USED)
    assert got == pytest.approx(passes, rel=1e-12)


@pytest.mark.parametrize("method,preset,passes", [
    # mean_teacher.py's 64 labelled and 64 unlabelled of 128 (fixmatch_cifar, ratio 1).
    ("mean_teacher", "fixmatch_cifar", 1984 * 64 / 130),
    # fixmatch.py's uratio 7: 128 // 8 = 16; ImageNet's uratio 5: 128 // 6 = 21.
    ("fixmatch", "fixmatch_cifar", 1984 * 16 / 130),
    ("fixmatch", "imagenet", 1984 * 21 / 130),
])
def test_a_ratio_left_to_the_preset_is_the_presets(method, preset, passes):
    """config.json records None for a setting the run's ``baseline_preset`` gives."""
    config = _config(method, unlabelled_ratio=None)
    config["method"]["baseline_preset"] = preset
    got = exposure.exposure(config, STEPS, LABELLED, USED)
    assert got == pytest.approx(passes, rel=1e-12)


def test_a_run_stopped_in_its_warm_start_has_seen_no_label():
    assert exposure.exposure(_config("llp", warmup_epochs=10), 200, LABELLED, USED) == 0


def test_every_method_has_a_rule():
    """A new method without one is refused, not counted as 0."""
    settings = {"llp": {"warmup_epochs": 1}, "supervised": {}}
    for method in METHODS:
        config = _config(method, **settings.get(method, {"unlabelled_ratio": 1}))
        assert exposure.exposure(config, 100, LABELLED, USED) > 0
    with pytest.raises(ValueError, match="No labelled-exposure rule for the method 'new'"):
        exposure.exposure(_config("new"), 100, LABELLED, USED)
