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
what it changes: docs/training.md, "GPU".

Not every device runs low-precision convolutions: oneDNN has no bfloat16
convolution on a CPU without AVX-512 (nor float16 where TensorFlow picks
oneDNN for it), and TensorFlow then fails mid-step or aborts the process.
`unsupported` probes one tiny convolution so that a run can refuse before
it starts.
"""

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
    """Why ``precision`` cannot train on ``device`` (a TensorFlow device name; ""
    for the default placement): TensorFlow's error, one line; None where it
    can, and always for float32.

    A child process runs `probe` on a device of the same type and index:
    where oneDNN lacks a kernel it may throw a C++ exception that aborts
    the whole process, not a Python error. Cached per process.
    """
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
    """Runs, as a training step does (in a `tf.function`, on ``device``), a 3x3
    convolution of a [1, 4, 4, 3] batch and a matmul in ``precision``'s
    compute dtype with their gradients; exits 1 with an ``unsupported:``
    line on stderr if TensorFlow refuses (or aborts the process)."""
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
