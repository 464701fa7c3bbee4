"""EmbeddingClassifier under a 2-replica MirroredStrategy (two logical CPUs): one
forward pass from the same weights against one device's, to `tests.numerics`' bound
for two orders of the network's sums.

The distributed model, its one-device copy and its traced passes are made once per module
(`built`) and put back to the model's initial weights for each test."""

import numpy as np
import pytest
import tensorflow as tf

from tests import numerics
from tests.models.helpers import TINY_EMBEDDING_DIM, TINY_IMAGE_SIZE, random_images, tiny_model

GLOBAL_BATCH = 8
#: Relative error of the tiny model's outputs between two orders of its sums.
RTOL = numerics.network_rtol(numerics.tiny_resnet_sums(GLOBAL_BATCH, TINY_IMAGE_SIZE,
                                                       TINY_EMBEDDING_DIM))


def split_over_replicas(strategy, images):
    """Distributed images: replica r gets the r-th equal slice, in order."""
    per_replica = len(images) // strategy.num_replicas_in_sync

    def replica_slice(context):
        start = context.replica_id_in_sync_group * per_replica
        return tf.constant(images[start:start + per_replica])

    return strategy.experimental_distribute_values_from_function(
        replica_slice)


def run_on_replicas(strategy, model, images, training, steps=None):
    """Model outputs on the global batch, replica slices concatenated (its traced pass kept
    in ``steps`` by ``training``, if given)."""
    step = (steps or {}).get(training)
    if step is None:
        @tf.function
        def step(distributed):
            return strategy.run(lambda x: model(x, training=training),
                                args=(distributed,))
        if steps is not None:
            steps[training] = step

    outputs = step(split_over_replicas(strategy, images))
    return {name: np.concatenate(
        [t.numpy() for t in strategy.experimental_local_results(value)])
        for name, value in outputs.items()}


def build_in_scope(strategy, images, **settings):
    with strategy.scope():
        model = tiny_model(**settings)
        model(images[:2])
    return model


def single_device_copy(model, images, **settings):
    copy = tiny_model(**settings)
    copy(images[:2])
    copy.set_weights(model.get_weights())
    return copy


def assert_close(expected, actual, what):
    """Within `RTOL` of ``expected`` in norm."""
    expected, actual = (np.asarray(a, np.float64) for a in (expected, actual))
    error, size = np.linalg.norm(actual - expected), np.linalg.norm(expected)
    assert error <= RTOL * size, f"{what}: apart by {error:.3g}, more than {RTOL:.3g} of {size:.3g}"


def assert_outputs_close(expected, actual):
    assert set(expected) == set(actual)
    for name in expected:
        assert_close(expected[name], actual[name], name)


class Built:
    """The default model built in the strategy's scope, its initial weights, a one-device
    model and the model's traced passes (`run_on_replicas`'s ``steps``)."""

    def __init__(self, strategy):
        self.strategy, images = strategy, random_images(GLOBAL_BATCH)
        self.model = build_in_scope(strategy, images)
        self.initial = self.model.get_weights()
        self.single = single_device_copy(self.model, images)
        self.steps = {}

    def fresh(self):
        """(model, its one-device copy), both at the model's initial weights."""
        with self.strategy.scope():
            self.model.set_weights(self.initial)
        self.single.set_weights(self.initial)
        return self.model, self.single

    def run(self, images, training):
        return run_on_replicas(self.strategy, self.model, images, training, self.steps)


@pytest.fixture(scope="module")
def built(two_replica_strategy):
    return Built(two_replica_strategy)


def test_variables_are_mirrored(two_replica_strategy, built):
    model, _ = built.fresh()
    for variable in model.weights:
        assert len(two_replica_strategy.experimental_local_results(
            variable.value)) == 2


def test_inference_matches_single_device(built):
    images = random_images(GLOBAL_BATCH)
    _, single = built.fresh()
    assert_outputs_close(single(images, training=False), built.run(images, training=False))


def test_checkpoint_round_trip_in_strategy(two_replica_strategy, built, tmp_path):
    strategy = two_replica_strategy
    images = random_images(GLOBAL_BATCH)
    model, _ = built.fresh()
    built.run(images, training=True)
    with strategy.scope():
        path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))

    restored = build_in_scope(strategy, images)
    with strategy.scope():
        tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    for saved, loaded in zip(model.weights, restored.weights):
        assert saved.path == loaded.path
        for copy in strategy.experimental_local_results(loaded.value):
            np.testing.assert_array_equal(saved.numpy(), copy.numpy())

    # The same checkpoint restores a single-device model (at the initial weights, unlike the
    # checkpoint's), which then agrees with the distributed one (the restored's weights, on
    # every replica, being the saved model's).
    _, single = built.fresh()
    tf.train.Checkpoint(model=single).read(path).assert_consumed()
    with strategy.scope():
        model.set_weights(restored.get_weights())
    assert_outputs_close(single(images, training=False), built.run(images, training=False))


def test_moving_statistics_stay_identical_across_replicas(
        two_replica_strategy, built):
    strategy = two_replica_strategy
    images = random_images(GLOBAL_BATCH)
    model, single = built.fresh()
    built.run(images, training=True)
    single(images, training=True)

    for norm in model.trunk.batch_norm_layers():
        for variable in (norm.moving_mean, norm.moving_variance):
            first, second = [
                v.numpy() for v in
                strategy.experimental_local_results(variable.value)]
            np.testing.assert_array_equal(first, second)
    # The first batch norm sees the same stem output in both runs; averaging
    # the replicas' updates of equal halves gives the global batch mean.
    first_norm = model.trunk.batch_norm_layers()[0]
    assert_close(single.trunk.batch_norm_layers()[0].moving_mean.numpy(),
                 first_norm.moving_mean.numpy(), "moving mean")


def test_sync_batch_norm_trains_like_one_device(two_replica_strategy, built):
    strategy = two_replica_strategy
    images = random_images(GLOBAL_BATCH)
    model = build_in_scope(strategy, images, sync_batch_norm=True)
    _, single = built.fresh()
    single.set_weights(model.get_weights())
    distributed = run_on_replicas(strategy, model, images, training=True)
    assert_outputs_close(single(images, training=True), distributed)
    for sync_norm, norm in zip(model.trunk.batch_norm_layers(),
                               single.trunk.batch_norm_layers()):
        assert_close(norm.moving_mean.numpy(), sync_norm.moving_mean.numpy(), norm.name)
        assert_close(norm.moving_variance.numpy(), sync_norm.moving_variance.numpy(),
                     norm.name)
