"""The LLP network: a ResNet-v2 trunk and two heads side by side.

After global pooling the trunk's features feed, in parallel,

- the embedding head: dense to D (128), then L2-normalised, so embeddings lie
  on the unit sphere; the memory bank, label propagation and the aggregation
  loss use these;
- the category head: dense to C class logits, trained with cross-entropy on
  (pseudo-)labelled examples.

The linear probe of the evaluation reads the pooled features before both.
"""

import contextlib
from typing import Any

import keras
import tensorflow as tf

from llp_tf.errors import ConfigError
from llp_tf.models import batch_norm
from llp_tf.models.config import EMBEDDING_DIM
from llp_tf.tensor_types import FloatTensor


class EmbeddingClassifier(keras.Model):
    """Trunk plus embedding and category heads.

    Args:
      trunk: a `ResNetV2` (or any layer mapping images [B, H, W, 3] to
        features [B, F] that has `feature_dim` and `batch_norm_layers()`).
      num_classes: C, the number of category logits.
      embedding_dim: D, the size of the unit-norm embedding.

    `call(images, training=False, update_moving_statistics=True)` takes
    float32 [B, H, W, 3] images, normalised with the ImageNet mean and std,
    channels last (``update_moving_statistics=False`` with ``training``: the
    batch norms normalise with the batch's moments but leave their moving
    statistics alone, `batch_norm.moving_statistics_kept`), and returns a
    dict of float32 tensors:

    - "features": [B, F], the pooled trunk output;
    - "embedding": [B, D], unit L2 norm;
    - "logits": [B, C].

    Built under a mixed-precision policy (`llp_tf.models.precision`), the
    trunk computes in bfloat16 or float16; the heads are float32 layers, so
    these outputs are float32 computed in float32 from the cast features.

    Create it inside `strategy.scope()` to train with a distribution strategy;
    it is trackable, so `tf.train.Checkpoint(model=model)` saves every weight
    and batch-norm moving statistic. Keras creates the weights on the first
    call, and a checkpoint read before that restores nothing into them (no
    deferred restoration for Keras 3 variables): call `create_weights()` (or
    the model) before restoring.
    """

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
        # Initialisers as in the release: `tf.layers.dense` defaults
        # (Glorot uniform) for the embedding head, variance scaling for the
        # category head; both with a zero-initialised bias. Both compute in
        # float32 under any mixed-precision policy: the embedding feeds the
        # bank's softmax at temperature 0.07, the logits a softmax too.
        self.embedding_head = keras.layers.Dense(
            embedding_dim, dtype="float32", name="embedding_head")
        self.category_head = keras.layers.Dense(
            num_classes, dtype="float32",
            kernel_initializer=keras.initializers.VarianceScaling(
                scale=1.0, mode="fan_in", distribution="truncated_normal"),
            name="category_head")

    @property
    def feature_dim(self) -> int:
        """F, the size of the pooled trunk features."""
        return self.trunk.feature_dim

    def create_weights(self, image_size: int = 32) -> "EmbeddingClassifier":
        """Creates every weight by one inference call on a zero batch.

        Inference mode leaves the batch-norm moving statistics untouched.
        Weight shapes do not depend on `image_size`. Returns the model.
        """
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
        """The variables that take weight decay.

        Every trainable variable except batch-norm gamma and beta, as in the
        release (TF official's filter on "batch_normalization" in the
        variable name): every conv kernel and dense kernel, and also the two
        heads' dense biases. Build the model (call it once) first.
        """
        if not self.built:
            raise ValueError(
                "EmbeddingClassifier.weight_decay_variables() needs a built model; call "
                "the model on a batch of images first.")
        excluded = {id(variable) for variable in self.batch_norm_variables()}
        return [variable for variable in self.trainable_variables
                if id(variable) not in excluded]
