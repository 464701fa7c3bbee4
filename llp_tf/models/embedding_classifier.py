"""The LLP network: a ResNet-v2 trunk whose pooled features feed two heads side by side,
the embedding head (dense to D, L2-normalised) and the category head (dense to C logits).
Importing this module registers the network's classes with Keras (package "llp_tf", the
trunk's from `resnet_v2` and `batch_norm`), which `keras.saving.load_model` needs."""

import contextlib
from typing import Any

import keras
import tensorflow as tf

from llp_tf.errors import ConfigError
from llp_tf.models import batch_norm
# Registers the trunk classes a saved EmbeddingClassifier names (ResNetV2 and its layers).
from llp_tf.models import resnet_v2  # noqa: F401
from llp_tf.models.config import EMBEDDING_DIM
from llp_tf.tensor_types import FloatTensor


@keras.saving.register_keras_serializable(package="llp_tf")
class EmbeddingClassifier(keras.Model):
    """Trunk plus embedding and category heads.

    Args:
      trunk: a `ResNetV2` (or a layer mapping images [B, H, W, 3] to features [B, F] with
        `feature_dim` and `batch_norm_layers()`).
      num_classes: C; embedding_dim: D.

    `call(images, training=False, update_moving_statistics=True)` takes float32 [B, H, W, 3]
    images (ImageNet-normalised, channels last) and returns float32 "features" [B, F],
    "embedding" [B, D] (unit norm) and "logits" [B, C]; the heads compute in float32 under any
    mixed-precision policy. ``update_moving_statistics=False``: see
    `batch_norm.moving_statistics_kept`. Keras 3 restores nothing into weights not yet created:
    call `create_weights()` before restoring a checkpoint. Serialisable ("llp_tf>
    EmbeddingClassifier", the trunk in its config): ``model.save("model.keras")`` and, once
    this module is imported, `keras.saving.load_model` in safe mode."""

    def __init__(self, trunk: keras.layers.Layer, num_classes: int,
                 embedding_dim: int = EMBEDDING_DIM, name: str = "embedding_classifier",
                 **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        for setting, value in (("num_classes", num_classes),
                               ("embedding_dim", embedding_dim)):
            if not (isinstance(value, int) and not isinstance(value, bool)
                    and value > 0):
                raise ConfigError(
                    f"LLP model {setting} {value!r} must be a positive "
                    "integer.")
        self.trunk = trunk
        self.num_classes = num_classes
        self.embedding_dim = embedding_dim
        # Initialisers as in the release: Glorot uniform (`tf.layers.dense`'s) for the embedding
        # head, variance scaling for the category head; zero biases. float32 under any policy.
        self.embedding_head = keras.layers.Dense(
            embedding_dim, dtype="float32", name="embedding_head")
        self.category_head = keras.layers.Dense(
            num_classes, dtype="float32",
            kernel_initializer=keras.initializers.VarianceScaling(
                scale=1.0, mode="fan_in", distribution="truncated_normal"),
            name="category_head")

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(),
                "trunk": keras.saving.serialize_keras_object(self.trunk),
                "num_classes": self.num_classes, "embedding_dim": self.embedding_dim}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "EmbeddingClassifier":
        config = dict(config)
        trunk = keras.saving.deserialize_keras_object(config.pop("trunk"))
        return cls(trunk, **config)

    @property
    def feature_dim(self) -> int:
        """F, the size of the pooled trunk features."""
        return self.trunk.feature_dim

    def create_weights(self, image_size: int = 32) -> "EmbeddingClassifier":
        """Creates every weight by one inference call on a zero batch; returns the model."""
        if not self.built:
            self(tf.zeros([1, image_size, image_size, 3]), training=False)
        return self

    def call(self, images: FloatTensor, training: bool = False,
             update_moving_statistics: bool = True) -> dict[str, FloatTensor]:
        with contextlib.nullcontext() if update_moving_statistics \
                else batch_norm.moving_statistics_kept():
            features = tf.cast(self.trunk(images, training=training), tf.float32)
        embedding = tf.math.l2_normalize(self.embedding_head(features), axis=-1)
        logits = self.category_head(features)
        return {
            "features": features,
            "embedding": embedding,
            "logits": logits,
        }

    def batch_norm_layers(self) -> list[keras.layers.Layer]:
        """The trunk's batch norms, in a fixed order."""
        return self.trunk.batch_norm_layers()

    def batch_norm_variables(self) -> list[keras.Variable]:
        """The batch-norm gamma and beta variables (trainable, no decay)."""
        return [variable for norm in self.batch_norm_layers()
                for variable in norm.trainable_weights]

    def weight_decay_variables(self) -> list[keras.Variable]:
        """Every trainable variable but batch-norm gamma and beta (heads' biases included), as the
        release's filter on "batch_normalization" does; the model must be built."""
        if not self.built:
            raise ValueError(
                "EmbeddingClassifier.weight_decay_variables() needs a built model; call "
                "the model on a batch of images first.")
        excluded = {id(variable) for variable in self.batch_norm_variables()}
        return [variable for variable in self.trainable_variables
                if id(variable) not in excluded]
