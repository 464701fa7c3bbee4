"""Small models and inputs shared by the model tests (CPU-sized)."""

import numpy as np
import pytest

from llp_tf.models import precision
from llp_tf.models.factory import build_model

TINY_IMAGE_SIZE = 16
TINY_NUM_CLASSES = 10
TINY_EMBEDDING_DIM = 32


def tiny_model(**overrides):
    """An unbuilt resnet10, width 1/8 (8 base filters), CIFAR stem."""
    settings = dict(architecture="resnet10", num_classes=TINY_NUM_CLASSES,
                    embedding_dim=TINY_EMBEDDING_DIM, width=0.125,
                    small_inputs=True)
    settings.update(overrides)
    return build_model(**settings)


def random_images(batch_size, size=TINY_IMAGE_SIZE, seed=0):
    """Normalised-looking float32 images [batch_size, size, size, 3]."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(batch_size, size, size, 3)).astype(np.float32)


def skip_unless_computable(low_precision):
    """Skips the calling test where this machine's TensorFlow cannot train in
    ``low_precision`` (e.g. bfloat16 on a CPU without AVX-512: `precision.unsupported`)."""
    reason = precision.unsupported(low_precision)
    if reason:
        pytest.skip(f"{low_precision} cannot run here: {reason}")
