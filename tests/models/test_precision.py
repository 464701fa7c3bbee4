"""Mixed precision: policies, a low-precision trunk with float32 heads, loss scaling."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from llp_tf.errors import ConfigError
from llp_tf.models import precision
from tests.models.helpers import skip_unless_computable, tiny_model


def test_policy_names_and_unknown_precision():
    assert [precision.policy_name(p) for p in precision.PRECISIONS] == [
        "float32", "mixed_bfloat16", "mixed_float16"]
    with pytest.raises(ConfigError, match="bfloat16"):
        precision.policy_name("half")


def test_dtype_policy_is_restored_even_after_an_error():
    before = keras.mixed_precision.dtype_policy().name
    with pytest.raises(RuntimeError):
        with precision.dtype_policy("float16"):
            assert keras.mixed_precision.dtype_policy().name == "mixed_float16"
            raise RuntimeError("inside")
    assert keras.mixed_precision.dtype_policy().name == before == "float32"


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
def test_low_precision_layers_compute_low_and_keep_float32_variables(low):
    """Built without a forward pass, so it runs where `low` cannot compute."""
    model = tiny_model(precision=low)
    assert model.trunk.stem_conv.compute_dtype == low
    assert model.trunk.stem_conv.variable_dtype == "float32"
    assert model.embedding_head.compute_dtype == model.category_head.compute_dtype == "float32"


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
def test_low_precision_trunk_float32_weights_heads_and_outputs(images, low):
    skip_unless_computable(low)
    reference = tiny_model().create_weights(16)
    model = tiny_model(precision=low).create_weights(16)
    model.set_weights(reference.get_weights())
    assert {str(v.dtype) for v in model.weights} == {"float32"}
    assert model.trunk.stem_conv.compute_dtype == low
    assert model.embedding_head.compute_dtype == model.category_head.compute_dtype == "float32"
    want, got = reference(images, training=False), model(images, training=False)
    for name in want:
        assert got[name].dtype == tf.float32
    embedding = got["embedding"].numpy().astype(np.float64)
    np.testing.assert_allclose(np.linalg.norm(embedding, axis=1), 1.0, atol=1e-6)
    # bfloat16 keeps 8 mantissa bits, float16 11: the cosine of each low-precision
    # embedding with its float32 one stays near 1, and the logits near theirs.
    cosine = np.sum(embedding * want["embedding"].numpy(), axis=1)
    assert cosine.min() > (0.995 if low == "bfloat16" else 0.9999)
    np.testing.assert_allclose(got["logits"], want["logits"],
                               atol=0.1 if low == "bfloat16" else 0.01)
    # The computation really is in low precision: not the float32 result.
    assert not np.array_equal(got["features"].numpy(), want["features"].numpy())


def test_only_float16_wraps_the_optimizer_in_loss_scaling():
    model = tiny_model().create_weights(16)
    sgd = keras.optimizers.SGD(0.1)
    sgd.build(model.trainable_variables)
    for name in ("float32", "bfloat16"):
        assert precision.wrap_optimizer(sgd, name, model.trainable_variables) is sgd
        assert precision.loss_scale(sgd) == 1.0
    scaled = precision.wrap_optimizer(sgd, "float16", model.trainable_variables)
    assert isinstance(scaled, keras.optimizers.LossScaleOptimizer)
    assert scaled.inner_optimizer is sgd and scaled.built
    assert float(precision.loss_scale(scaled)) == 2.0 ** 15


def test_float32_is_never_probed_and_a_refusal_is_one_sentence(monkeypatch):
    assert precision.unsupported("float32") is None
    precision.require_supported("float32")
    monkeypatch.setattr(precision, "unsupported", lambda name, device="": "no kernel")
    with pytest.raises(ConfigError) as refused:
        precision.require_supported("bfloat16", "/device:CPU:0")
    message = str(refused.value)
    assert message.startswith("--mixed_precision=bfloat16 cannot run on this machine")
    assert "(no kernel)" in message and "/device:CPU:0" in message
    assert "--mixed_precision=float32" in message and message.count(". ") == 0


ABORTING_CHILD = """#!/bin/sh
echo "terminate called after throwing an instance of 'dnnl::error'" >&2
echo "  what():  could not create a primitive descriptor for a convolution forward. More" >&2
kill -ABRT $$
"""
REFUSING_CHILD = """#!/bin/sh
echo "Traceback (most recent call last):" >&2
echo '  File "<string>", line 1, in <module>' >&2
echo "unsupported: NotFoundError: No registered 'Conv2D' OpKernel for 'CPU' devices. Registered" >&2
exit 1
"""


@pytest.mark.parametrize("script, reason", [
    (ABORTING_CHILD, "could not create a primitive descriptor for a convolution forward"),
    (REFUSING_CHILD, "NotFoundError: No registered 'Conv2D' OpKernel for 'CPU' devices")])
def test_a_child_that_aborts_or_refuses_gives_its_first_sentence(tmp_path, monkeypatch, script,
                                                                 reason):
    """oneDNN aborts the process (a C++ ``what():`` line, SIGABRT); TensorFlow refuses with
    an error (`precision.probe`'s ``unsupported:`` line after a traceback). Either gives one
    sentence, without the traceback."""
    child = tmp_path / "python"
    child.write_text(script)
    child.chmod(0o755)
    monkeypatch.setattr(precision.sys, "executable", str(child))
    assert precision.unsupported.__wrapped__("bfloat16") == reason


@pytest.mark.slow
def test_tensorflows_own_kernels_train_both_low_precisions_in_the_child(monkeypatch):
    """Without oneDNN, TensorFlow's CPU kernels run the probe's convolution and matmul with
    gradients in bfloat16 and float16 (whether oneDNN does depends on the CPU and its build)."""
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    for low in ("bfloat16", "float16"):
        assert precision.unsupported.__wrapped__(low) is None
