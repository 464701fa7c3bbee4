"""Mixed precision: ``bfloat16`` / ``float16`` build the trunk under Keras's ``mixed_*`` policy
(low-precision compute, float32 variables, float32 heads); float16 adds dynamic loss scaling,
not checkpointed. A device that cannot run the precision is refused before a run starts
(`unsupported`). docs/training.md, "GPU"."""

import contextlib
import functools
import os
import pathlib
import subprocess
import sys
from typing import Iterator, Sequence

import keras
import tensorflow as tf

from llp_tf.errors import ConfigError
from llp_tf.models.config import PRECISION_POLICIES, PRECISIONS
from llp_tf.tensor_types import FloatTensor


def policy_name(precision: str) -> str:
    """The Keras dtype policy of a precision setting ("float32", "bfloat16", "float16")."""
    if precision not in PRECISION_POLICIES:
        raise ConfigError(f"Unknown mixed precision {precision!r}; choose one of "
                          f"{', '.join(PRECISIONS)}.")
    return PRECISION_POLICIES[precision]


@functools.cache
def unsupported(precision: str, device: str = "") -> str | None:
    """Why ``precision`` cannot train on ``device`` ("" for the default placement): TensorFlow's
    error in one line; None where it can, and for float32. Probed in a child process (oneDNN
    may abort the process); cached."""
    if policy_name(precision) == "float32":
        return None
    spec = tf.DeviceSpec.from_string(device or "/CPU:0")
    local = f"/{spec.device_type or 'CPU'}:{spec.device_index or 0}"
    package_root = pathlib.Path(__file__).resolve().parents[2]
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from llp_tf.models.precision import probe; probe(sys.argv[2], sys.argv[3])")
    child = subprocess.run(
        [sys.executable, "-c", code, str(package_root), precision, local],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if child.returncode == 0:
        return None
    lines = [line.strip() for line in child.stderr.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith(("what():", "unsupported:"))]
    detail = (said or lines or [f"exit code {child.returncode}"])[-1]
    detail = detail.removeprefix("what():").removeprefix("unsupported:").strip()
    return detail.split(". ")[0].rstrip(".")[:200]


def probe(precision: str, device: str) -> None:
    """Runs a 3x3 convolution and a matmul with gradients in ``precision`` on ``device`` in a
    `tf.function`; exits 1 with an ``unsupported:`` line on stderr if TensorFlow refuses."""
    dtype = tf.as_dtype(policy_name(precision).removeprefix("mixed_"))

    @tf.function
    def step(images, kernel, weights):
        with tf.GradientTape() as tape:
            tape.watch([images, kernel, weights])
            features = tf.nn.conv2d(images, kernel, 1, "SAME")
            logits = tf.matmul(tf.reshape(features, [1, -1]), weights)
            total = tf.reduce_sum(tf.cast(logits, tf.float32))
        return total, tape.gradient(total, [images, kernel, weights])

    try:
        with tf.device(device):
            step(tf.ones([1, 4, 4, 3], dtype), tf.ones([3, 3, 3, 2], dtype),
                 tf.ones([32, 2], dtype))
    except tf.errors.OpError as error:
        reason = error.message.strip().splitlines()[0]
        sys.stderr.write(f"unsupported: {type(error).__name__}: {reason}\n")
        sys.exit(1)


def require_supported(precision: str, device: str = "") -> None:
    """Raises `ConfigError` with one sentence if `unsupported` gives a reason."""
    reason = unsupported(precision, device)
    if reason:
        raise ConfigError(
            f"--mixed_precision={precision} cannot run on this machine, whose TensorFlow "
            f"has no {precision} kernel for a step on {device or 'its default device'} "
            f"({reason}); train with --mixed_precision=float32, or on a GPU, or set "
            "TF_ENABLE_ONEDNN_OPTS=0 for TensorFlow's slower CPU kernels without oneDNN.")


@contextlib.contextmanager
def dtype_policy(precision: str) -> Iterator[None]:
    """Layers created inside compute in ``precision``; the previous global policy is restored."""
    previous = keras.mixed_precision.dtype_policy()
    keras.mixed_precision.set_dtype_policy(policy_name(precision))
    try:
        yield
    finally:
        keras.mixed_precision.set_dtype_policy(previous)


def wrap_optimizer(optimizer: keras.optimizers.Optimizer, precision: str,
                   variables: Sequence[keras.Variable]) -> keras.optimizers.Optimizer:
    """``optimizer``, or for float16 a `LossScaleOptimizer` around it built for ``variables`` (in
    the strategy's scope); the checkpoint keeps the inner one."""
    if policy_name(precision) != "mixed_float16":
        return optimizer
    scaled = keras.optimizers.LossScaleOptimizer(optimizer)
    scaled.build(list(variables))
    return scaled


def loss_scale(optimizer: keras.optimizers.Optimizer) -> FloatTensor | float:
    """The factor a step's loss is scaled by: a `LossScaleOptimizer`'s dynamic scale, else 1.0."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer.scale_loss(1.0)
    return 1.0
