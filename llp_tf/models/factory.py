"""Build an `EmbeddingClassifier` from an architecture name."""

from collections.abc import Sequence

from llp_tf.errors import ConfigError
from llp_tf.models.config import (ARCHITECTURES, BATCH_NORM_EPSILON, BATCH_NORM_MOMENTUM,
                                  EMBEDDING_DIM, ModelConfig)
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.models.precision import dtype_policy
from llp_tf.models.resnet_v2 import ResNetV2


def build_model(architecture: str, num_classes: int,
                embedding_dim: int = EMBEDDING_DIM, width: float = 1.0,
                small_inputs: bool = False,
                blocks_per_stage: Sequence[int] | None = None,
                sync_batch_norm: bool = False,
                batch_norm_momentum: float = BATCH_NORM_MOMENTUM,
                batch_norm_epsilon: float = BATCH_NORM_EPSILON,
                precision: str = "float32") -> EmbeddingClassifier:
    """An unbuilt `EmbeddingClassifier` (weights created on the first call); create it inside
    `strategy.scope()` to train with a strategy.

    Args:
      architecture: one of `ARCHITECTURES`; num_classes: C; embedding_dim: D.
      width, small_inputs, sync_batch_norm, batch_norm_momentum, batch_norm_epsilon: as
        `ResNetV2`'s (the batch-norm defaults are the release's).
      blocks_per_stage: overrides the architecture's, e.g. [1, 1] for a two-stage toy.
      precision: "float32", "bfloat16" or "float16" (`llp_tf.models.precision`).

    Raises:
      ConfigError: an unknown architecture or an invalid setting."""
    if architecture not in ARCHITECTURES:
        raise ConfigError(
            f"Unknown architecture {architecture!r}; choose one of "
            f"{', '.join(sorted(ARCHITECTURES))}.")
    spec = ARCHITECTURES[architecture]
    with dtype_policy(precision):
        return _build(spec, num_classes, embedding_dim, width, small_inputs, blocks_per_stage,
                      sync_batch_norm, batch_norm_momentum, batch_norm_epsilon)


def _build(spec, num_classes, embedding_dim, width, small_inputs, blocks_per_stage,
           sync_batch_norm, batch_norm_momentum, batch_norm_epsilon):
    trunk = ResNetV2(
        blocks_per_stage=(spec.blocks_per_stage if blocks_per_stage is None
                          else blocks_per_stage),
        bottleneck=spec.bottleneck,
        width=width,
        small_inputs=small_inputs,
        sync_batch_norm=sync_batch_norm,
        batch_norm_momentum=batch_norm_momentum,
        batch_norm_epsilon=batch_norm_epsilon)
    return EmbeddingClassifier(trunk, num_classes=num_classes,
                    embedding_dim=embedding_dim)


def build_model_from_config(model_config: ModelConfig, num_classes: int,
                            image_size: int, precision: str = "float32") -> EmbeddingClassifier:
    """The `EmbeddingClassifier` of a run's `ModelConfig`, its weights created (``precision``: as
    `build_model`'s; export and analysis use float32)."""
    m = model_config
    return build_model(
        m.architecture, num_classes, embedding_dim=m.embedding_dim, width=m.width,
        small_inputs=m.small_inputs, blocks_per_stage=m.blocks_per_stage,
        sync_batch_norm=m.sync_batch_norm,
        batch_norm_momentum=m.batch_norm_momentum,
        precision=precision).create_weights(image_size)
