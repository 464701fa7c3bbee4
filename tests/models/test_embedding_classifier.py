"""EmbeddingClassifier: outputs, batch norm, weight decay, tf.function, checkpoints.

Tests that only read a model share one built per module (`model`), those that restore a
checkpoint one trained model and its checkpoint (`trained`); the ones that watch the moving
statistics from their start build their own."""

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.errors import ConfigError
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.models.resnet_v2 import ResNetV2
from tests.models.helpers import (TINY_EMBEDDING_DIM, TINY_NUM_CLASSES, random_images,
                                  tiny_model)


def moving_statistics(model):
    return [norm.moving_mean.numpy().copy()
            for norm in model.trunk.batch_norm_layers()]


@pytest.fixture(scope="module")
def model():
    """A built tiny model (tests may run it in training mode: its moving statistics change)."""
    built = tiny_model()
    built(random_images(8))
    return built


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(model, path of its checkpoint): a tiny model after one training-mode pass (non-trivial
    moving statistics), not changed after."""
    built = tiny_model()
    built(random_images(8), training=True)
    return built, tf.train.Checkpoint(model=built).write(
        str(tmp_path_factory.mktemp("trained") / "model"))


def test_outputs_keys_shapes_dtypes(model, images):
    outputs = model(images)
    assert set(outputs) == {"features", "embedding", "logits"}
    assert outputs["features"].shape == (8, model.feature_dim)
    assert model.feature_dim == 64
    assert outputs["embedding"].shape == (8, TINY_EMBEDDING_DIM)
    assert outputs["logits"].shape == (8, TINY_NUM_CLASSES)
    for value in outputs.values():
        assert value.dtype == tf.float32


@pytest.mark.parametrize("training", [False, True])
def test_embeddings_have_unit_norm(model, images, training):
    embedding = model(images * 5.0, training=training)["embedding"]
    np.testing.assert_allclose(np.linalg.norm(embedding, axis=1), 1.0,
                               atol=1e-5)


def test_heads_read_the_pooled_features(model, images):
    outputs = model(images)
    np.testing.assert_allclose(
        outputs["logits"], model.category_head(outputs["features"]),
        rtol=1e-5, atol=1e-5)
    unnormalised = model.embedding_head(outputs["features"]).numpy()
    np.testing.assert_allclose(
        outputs["embedding"],
        unnormalised / np.linalg.norm(unnormalised, axis=1, keepdims=True),
        rtol=1e-5, atol=1e-5)


def test_inference_is_the_default_and_leaves_moving_statistics(model, images):
    first = model(images)
    before = moving_statistics(model)
    second = model(images, training=False)
    for name in first:
        np.testing.assert_array_equal(first[name], second[name])
    for old, new in zip(before, moving_statistics(model)):
        np.testing.assert_array_equal(old, new)


def test_training_mode_uses_batch_statistics_and_updates_moving_ones(images):
    model = tiny_model()
    inference = model(images, training=False)
    before = moving_statistics(model)
    training = model(images, training=True)
    assert not np.allclose(inference["features"], training["features"],
                           atol=1e-3)
    after = moving_statistics(model)
    assert all(not np.array_equal(old, new)
               for old, new in zip(before, after))
    # Each update moves 1 - 0.997 of the way to the batch mean; the first
    # batch norm sees the stem output directly.
    stem_output = model.trunk.stem_conv(images).numpy()
    np.testing.assert_allclose(
        after[0], 0.003 * stem_output.mean(axis=(0, 1, 2)),
        rtol=1e-4, atol=1e-7)


def test_training_without_updates_uses_batch_statistics_and_keeps_moving_ones(images):
    model, updating = tiny_model().create_weights(16), tiny_model().create_weights(16)
    updating.set_weights(model.get_weights())
    inference = model(images, training=False)
    got = model(images, training=True, update_moving_statistics=False)
    want = updating(images, training=True)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)
    assert not np.allclose(inference["features"], got["features"], atol=1e-3)
    assert all(np.all(mean == 0) for mean in moving_statistics(model))
    assert all(not np.all(mean == 0) for mean in moving_statistics(updating))


def test_tf_function_matches_eager(model, images):
    eager = model(images)
    compiled = tf.function(lambda x: model(x, training=False))(
        tf.constant(images))
    for name in eager:
        np.testing.assert_allclose(eager[name], compiled[name],
                                   rtol=1e-5, atol=1e-5)


def test_weight_decay_excludes_batch_norm_and_covers_every_kernel(model, images):
    decayed = {id(v) for v in model.weight_decay_variables()}
    batch_norm = {id(v) for v in model.batch_norm_variables()}
    paths = {id(v): v.path for v in model.trainable_variables}

    # Found by variable name, independently of the model's own bookkeeping.
    norm_params = {i for i, p in paths.items()
                   if p.endswith("/gamma") or p.endswith("/beta")}
    conv_kernels = {id(v) for v in model.trainable_variables
                    if len(v.shape) == 4}
    dense_params = {id(v) for layer in (model.embedding_head,
                                        model.category_head)
                    for v in layer.trainable_weights}

    assert batch_norm == norm_params
    assert not decayed & norm_params
    assert conv_kernels <= decayed
    # resnet10: stem + 4 blocks of (projection + two 3x3 convs).
    assert len(conv_kernels) == 1 + 4 * 3
    # The dense kernels and (a choice, as in the release) their biases.
    assert dense_params <= decayed and len(dense_params) == 4
    assert decayed | norm_params == set(paths)
    assert len(decayed) == len(model.weight_decay_variables())


def test_weight_decay_variables_need_a_built_model():
    with pytest.raises(ValueError, match="built"):
        tiny_model().weight_decay_variables()


def test_bottleneck_model_outputs(images):
    model = tiny_model(architecture="resnet50", blocks_per_stage=[1, 1])
    outputs = model(images)
    assert outputs["features"].shape == (8, 4 * 16)


def test_checkpoint_round_trip_restores_every_weight(images, trained):
    model, path = trained

    restored = tiny_model()
    restored(images[:1])
    assert not all(np.array_equal(a, b) for a, b in
                   zip(model.get_weights(), restored.get_weights()))
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()

    assert len(model.weights) == len(restored.weights)
    for saved, loaded in zip(model.weights, restored.weights):
        assert saved.path == loaded.path
        np.testing.assert_array_equal(saved.numpy(), loaded.numpy())
    expected, actual = model(images), restored(images)
    for name in expected:
        np.testing.assert_array_equal(expected[name], actual[name])


def test_checkpoint_holds_every_variable(trained):
    model, path = trained
    shapes = sorted(tuple(shape) for name, shape in
                    tf.train.list_variables(path)
                    if name != "_CHECKPOINTABLE_OBJECT_GRAPH")
    assert shapes == sorted(tuple(v.shape) for v in model.weights)


@pytest.mark.parametrize("setting", ["num_classes", "embedding_dim"])
@pytest.mark.parametrize("value", [0, -3, 2.0, True])
def test_invalid_head_sizes(setting, value):
    trunk = ResNetV2((1,), bottleneck=False)
    arguments = {"num_classes": 10, "embedding_dim": 8, setting: value}
    with pytest.raises(ConfigError, match=setting):
        EmbeddingClassifier(trunk, **arguments)


def test_create_weights_then_restore(trained):
    model, path = trained

    restored = tiny_model().create_weights()
    assert restored.built
    before = [v.numpy().copy() for v in restored.weights]
    restored.create_weights()  # a no-op once built
    for old, variable in zip(before, restored.weights):
        np.testing.assert_array_equal(old, variable.numpy())
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    for saved, loaded in zip(model.get_weights(), restored.get_weights()):
        np.testing.assert_array_equal(saved, loaded)


@pytest.mark.parametrize("overrides", [
    {},
    # Bottleneck blocks, the ImageNet stem with its pool, non-default batch-norm settings.
    dict(architecture="resnet50", blocks_per_stage=[1, 1], small_inputs=False,
         sync_batch_norm=True, batch_norm_momentum=0.9, batch_norm_epsilon=1e-3),
])
def test_a_saved_keras_file_loads_in_safe_mode_with_the_same_settings_and_weights(
        images, tmp_path, overrides):
    import keras
    model = tiny_model(**overrides).create_weights(16)
    for variable in model.weights:  # weights unlike a fresh model's, statistics included
        variable.assign(np.random.default_rng(len(variable.path)).normal(
            size=variable.shape).astype(np.float32) * 0.1 + (1.0 if "variance" in variable.path
                                                            else 0.0))
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert type(loaded) is EmbeddingClassifier
    assert loaded.get_config() == model.get_config()
    trunk = loaded.trunk
    assert (trunk.blocks_per_stage, trunk.bottleneck, trunk.small_inputs) == (
        model.trunk.blocks_per_stage, model.trunk.bottleneck, model.trunk.small_inputs)
    norm = trunk.batch_norm_layers()[0]
    assert (norm.synchronized, norm.momentum, norm.epsilon) == (
        model.trunk.batch_norm_layers()[0].synchronized,
        overrides.get("batch_norm_momentum", 0.997), overrides.get("batch_norm_epsilon", 1e-5))
    # Keras builds a loaded subclassed model outside its name scope: shorter weight paths.
    assert all(saved.path.endswith("/" + restored.path)
               for saved, restored in zip(model.weights, loaded.weights, strict=True))
    for saved, restored in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(restored.numpy(), saved.numpy(), err_msg=saved.path)
    expected, actual = model(images), loaded(images)
    for key in expected:
        np.testing.assert_array_equal(actual[key].numpy(), expected[key].numpy(), err_msg=key)
