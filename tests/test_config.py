import dataclasses

import pytest

from llp_tf import config as config_lib
from llp_tf.config import TrainConfig
from llp_tf.errors import ConfigError


def test_json_round_trip_keeps_every_field(tmp_path):
    config = TrainConfig(run_dir=str(tmp_path), blocks_per_stage=(1, 1), lr_drop_epochs=(3, 5),
                         split_seed=4, label_percent=1.0, min_crop_area=0.3,
                         label_subset="1percent")
    assert TrainConfig.from_json(config.to_json()) == config


def test_learning_rate_scales_with_global_batch(tmp_path):
    assert TrainConfig(run_dir=str(tmp_path)).learning_rate == pytest.approx(0.03)
    assert TrainConfig(run_dir=str(tmp_path), global_batch_size=256).learning_rate == \
        pytest.approx(0.06)


@pytest.mark.parametrize("changes,match", [
    (dict(method="semi"), "method"),
    (dict(propagation="lp"), "propagation"),
    (dict(label_percent=0), "label_percent"),
    (dict(label_percent=20, data_percent=10), "cannot exceed"),
    (dict(epochs=5, warmup_epochs=6), "warmup_epochs"),
    (dict(temperature=0), "temperature"),
    (dict(bank_momentum=1.0), "bank_momentum"),
    (dict(min_crop_area=0.0), "min_crop_area"),
    (dict(min_crop_area=1.5), "min_crop_area"),
    (dict(split_file="s.npz", label_subset="1percent"), "split_file or label_subset, not both"),
])
def test_invalid_settings_are_one_clear_error(tmp_path, changes, match):
    with pytest.raises(ConfigError, match=match):
        TrainConfig(run_dir=str(tmp_path), **changes)


def test_resuming_with_changed_state_settings_is_refused(tmp_path):
    config = TrainConfig(run_dir=str(tmp_path), label_percent=1.0)
    config_lib.save_config(config)
    config_lib.check_resumable(dataclasses.replace(config, epochs=500))  # harmless change
    with pytest.raises(ConfigError, match="label_percent: saved 1.0, now 10.0"):
        config_lib.check_resumable(dataclasses.replace(config, label_percent=10.0))
