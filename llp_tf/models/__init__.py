"""Networks: pre-activation ResNet trunks and the two-headed LLP model."""

from llp_tf.models.factory import ARCHITECTURES, build_model, build_model_from_config
from llp_tf.models.llp_model import DEFAULT_EMBEDDING_DIM, LLPModel
from llp_tf.models.resnet_v2 import ResNetV2

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_EMBEDDING_DIM",
    "LLPModel",
    "ResNetV2",
    "build_model",
    "build_model_from_config",
]
