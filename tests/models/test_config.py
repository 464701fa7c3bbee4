"""The model section of the config: its choices, defaults and the feature-map rule."""

import pytest

from llp_tf.core import hyperparameters
from llp_tf.models import config
from llp_tf.training.config import TrainConfig


def test_defaults_are_the_papers_and_the_releases():
    model = TrainConfig.from_settings(run_dir="r")
    assert (model.model.embedding_dim, model.model.batch_norm_momentum) == (128, 0.997)
    assert config.EMBEDDING_DIM == 128 and config.BATCH_NORM_MOMENTUM == 0.997
    assert (model.method_settings.k, model.method_settings.t, model.method_settings.temperature,
            model.method_settings.bank_momentum) == (10, 25, 0.07, 0.5)
    assert (hyperparameters.K, hyperparameters.T, hyperparameters.TEMPERATURE) == (10, 25, 0.07)


@pytest.mark.parametrize("settings,image_size,side", [
    (dict(architecture="resnet18"), 224, 7),      # stem 4, then stages 1, 2, 2, 2
    (dict(architecture="resnet18"), 28, 1),
    (dict(architecture="resnet10", small_inputs=True), 32, 4),
    (dict(architecture="resnet50", blocks_per_stage=(1, 1)), 28, 4),
])
def test_final_feature_map_side(settings, image_size, side):
    assert config.final_feature_map_side(config.ModelConfig(**settings), image_size) == side


def test_model_problems():
    assert config.model_problems(config.ModelConfig()) == []
    assert config.model_problems(config.ModelConfig(width=0, batch_norm_momentum=1.0)) == [
        "{width} must be positive", "{batch_norm_momentum} must lie in [0, 1)"]
