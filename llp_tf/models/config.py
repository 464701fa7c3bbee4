"""The model section of a run's config, with the architectures, embedding size, batch-norm
settings and precisions the network code defaults to. Imports no TensorFlow."""

import dataclasses
from typing import NamedTuple, Optional, Tuple

from llp_tf.config_fields import setting


class Architecture(NamedTuple):
    blocks_per_stage: tuple
    bottleneck: bool


#: TF official's ResNet sizes, plus "resnet10" (one basic block per stage) for tests and demos.
ARCHITECTURES = {
    "resnet10": Architecture((1, 1, 1, 1), bottleneck=False),
    "resnet18": Architecture((2, 2, 2, 2), bottleneck=False),
    "resnet34": Architecture((3, 4, 6, 3), bottleneck=False),
    "resnet50": Architecture((3, 4, 6, 3), bottleneck=True),
    "resnet101": Architecture((3, 4, 23, 3), bottleneck=True),
    "resnet152": Architecture((3, 8, 36, 3), bottleneck=True),
}

#: D, the paper's embedding size.
EMBEDDING_DIM = 128
#: The release's batch-norm decay and epsilon.
BATCH_NORM_MOMENTUM = 0.997
BATCH_NORM_EPSILON = 1e-5

#: The settings of ``--mixed_precision``, each with its Keras policy name.
PRECISION_POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16",
                      "float16": "mixed_float16"}
PRECISIONS = tuple(PRECISION_POLICIES)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The network: ResNet-v2 trunk and the two heads."""

    architecture: str = setting("resnet18", "Pre-activation (v2) ResNet; resnet10 is the tiny "
                                "one for tests and CPU demos.", choices=tuple(ARCHITECTURES),
                                state=True)
    width: float = setting(1.0, "Filter-count multiplier of the ResNet (0.25 for CPU demos).",
                           state=True)
    blocks_per_stage: Optional[Tuple[int, ...]] = setting(
        None, "Override the architecture's blocks per stage, e.g. 1,1,1 for a three-stage toy "
        "network.", state=True)
    small_inputs: bool = setting(False, "CIFAR-style stem (3x3 conv, no pooling) for 28-32 px "
                                 "images.", state=True)
    embedding_dim: int = setting(EMBEDDING_DIM, "D: size of the L2-normalised embedding.",
                                 state=True)
    sync_batch_norm: bool = setting(False, "Batch-norm statistics over all replicas (needed for "
                                    "results identical to one replica).")
    batch_norm_momentum: float = setting(
        BATCH_NORM_MOMENTUM, f"Decay of the batch-norm moving statistics (the release's "
        f"{BATCH_NORM_MOMENTUM} suits long runs; short runs need ~0.9, or evaluation sees "
        "statistics that lag training).")


def final_feature_map_side(model: ModelConfig, image_size: int) -> int:
    """Side of the trunk's last feature map for square ``image_size`` inputs."""
    stages = len(model.blocks_per_stage or ARCHITECTURES[model.architecture].blocks_per_stage)
    stride = (1 if model.small_inputs else 4) * 2 ** (stages - 1)
    return -(-image_size // stride)


def model_problems(model: ModelConfig) -> list[str]:
    """What is wrong with the model settings, one message each (settings as ``{flag name}``)."""
    checks = [
        (model.width > 0, "{width} must be positive"),
        (0 <= model.batch_norm_momentum < 1, "{batch_norm_momentum} must lie in [0, 1)"),
    ]
    return [message for ok, message in checks if not ok]
