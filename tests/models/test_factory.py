"""build_model: architecture names, overrides and errors."""

import pytest

from llp_tf.errors import ConfigError, LLPError
from llp_tf.models.config import ARCHITECTURES
from llp_tf.models.factory import build_model
from llp_tf.models.embedding_classifier import EmbeddingClassifier


@pytest.mark.parametrize("name, blocks, bottleneck", [
    ("resnet10", (1, 1, 1, 1), False),
    ("resnet18", (2, 2, 2, 2), False),
    ("resnet34", (3, 4, 6, 3), False),
    ("resnet50", (3, 4, 6, 3), True),
    ("resnet101", (3, 4, 23, 3), True),
    ("resnet152", (3, 8, 36, 3), True),
])
def test_known_architectures(name, blocks, bottleneck):
    model = build_model(name, num_classes=5, width=0.125)
    assert isinstance(model, EmbeddingClassifier)
    assert model.trunk.blocks_per_stage == blocks
    assert model.trunk.bottleneck is bottleneck
    assert len(model.trunk.blocks) == sum(blocks)
    assert model.feature_dim == 8 * 8 * (4 if bottleneck else 1)
    assert model.embedding_dim == 128 and model.num_classes == 5
    assert not model.trunk.small_inputs


def test_settings_reach_the_trunk():
    model = build_model("resnet50", num_classes=3, embedding_dim=16,
                        width=0.25, small_inputs=True, blocks_per_stage=[1, 2],
                        sync_batch_norm=True, batch_norm_momentum=0.9)
    trunk = model.trunk
    assert trunk.blocks_per_stage == (1, 2) and trunk.bottleneck
    assert trunk.small_inputs and trunk.sync_batch_norm
    assert trunk.width == 0.25 and model.feature_dim == 4 * 32
    assert model.embedding_dim == 16
    assert trunk.final_bn.momentum == pytest.approx(0.9)


def test_unknown_architecture_lists_the_known_names():
    with pytest.raises(ConfigError) as error:
        build_model("resnet19", num_classes=10)
    message = str(error.value)
    assert "'resnet19'" in message
    for name in ARCHITECTURES:
        assert name in message
    assert isinstance(error.value, LLPError)
