"""Mixed precision: the network's compute dtype, and loss scaling for float16.

``float32`` computes everything in float32. ``bfloat16`` and ``float16``
build the trunk under the Keras policy ``mixed_bfloat16`` /
``mixed_float16``: convolutions and dense layers compute in the low
precision, every variable stays float32 (checkpoints are the same whatever
the setting), and batch norm computes its statistics in float32. The two
heads are float32 layers whatever the policy, so the embedding, the bank,
propagation, densities and both losses stay float32. float16 trains with
dynamic loss scaling (`keras.optimizers.LossScaleOptimizer`); the scale is
not checkpointed, so a resumed float16 run starts again from 2^15. Why, and
what it changes: README, "GPU".
"""

import contextlib
from typing import Iterator, Sequence

import keras

from llp_tf.errors import ConfigError
from llp_tf.models.config import PRECISION_POLICIES, PRECISIONS
from llp_tf.types import FloatTensor

def policy_name(precision: str) -> str:
    """The Keras dtype policy of a precision setting ("float32", "bfloat16", "float16")."""
    if precision not in PRECISION_POLICIES:
        raise ConfigError(f"Unknown mixed precision {precision!r}; choose one of "
                          f"{', '.join(PRECISIONS)}.")
    return PRECISION_POLICIES[precision]


@contextlib.contextmanager
def dtype_policy(precision: str) -> Iterator[None]:
    """Layers created inside compute in ``precision`` (see the module docstring).

    Keras layers take the global policy when they are created, so the
    policy is set for the block and the previous one restored after it:
    nothing else in the process (export, the probe, another run) changes.
    """
    previous = keras.mixed_precision.dtype_policy()
    keras.mixed_precision.set_dtype_policy(policy_name(precision))
    try:
        yield
    finally:
        keras.mixed_precision.set_dtype_policy(previous)


def wrap_optimizer(optimizer: keras.optimizers.Optimizer, precision: str,
                   variables: Sequence[keras.Variable]) -> keras.optimizers.Optimizer:
    """The optimizer a step applies gradients with: ``optimizer`` itself, or for
    float16 a `LossScaleOptimizer` around it, built for ``variables`` (the
    model's trainable variables; create it in the strategy's scope).

    The checkpoint keeps ``optimizer`` (the inner one), so its slots restore
    whatever the precision.
    """
    if policy_name(precision) != "mixed_float16":
        return optimizer
    scaled = keras.optimizers.LossScaleOptimizer(optimizer)
    scaled.build(list(variables))
    return scaled


def loss_scale(optimizer: keras.optimizers.Optimizer) -> FloatTensor | float:
    """The factor a step's loss is scaled by before the backward pass: the
    dynamic scale of a `LossScaleOptimizer`, else 1.0."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer.scale_loss(1.0)
    return 1.0
