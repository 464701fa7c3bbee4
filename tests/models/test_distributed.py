"""EmbeddingClassifier under a 2-replica MirroredStrategy (two logical CPUs): one
forward pass from the same weights against one device's, to `tests.numerics`' bound
for two orders of the network's sums."""

import numpy as np
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


def run_on_replicas(strategy, model, images, training):
    """Model outputs on the global batch, replica slices concatenated."""
    @tf.function
    def step(distributed):
        return strategy.run(lambda x: model(x, training=training),
                            args=(distributed,))

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


def test_variables_are_mirrored(two_replica_strategy):
    model = build_in_scope(two_replica_strategy, random_images(GLOBAL_BATCH))
    for variable in model.weights:
        assert len(two_replica_strategy.experimental_local_results(
            variable.value)) == 2


def test_inference_matches_single_device(two_replica_strategy):
    images = random_images(GLOBAL_BATCH)
    model = build_in_scope(two_replica_strategy, images)
    single = single_device_copy(model, images)
    assert_outputs_close(single(images, training=False),
                         run_on_replicas(two_replica_strategy, model, images,
                                         training=False))


def test_checkpoint_round_trip_in_strategy(two_replica_strategy, tmp_path):
    strategy = two_replica_strategy
    images = random_images(GLOBAL_BATCH)
    model = build_in_scope(strategy, images)
    run_on_replicas(strategy, model, images, training=True)
    with strategy.scope():
        path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))

    restored = build_in_scope(strategy, images)
    with strategy.scope():
        tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    for saved, loaded in zip(model.weights, restored.weights):
        assert saved.path == loaded.path
        for copy in strategy.experimental_local_results(loaded.value):
            np.testing.assert_array_equal(saved.numpy(), copy.numpy())

    # The same checkpoint restores a single-device model, which then agrees
    # with the distributed one.
    single = tiny_model()
    single(images[:2])
    tf.train.Checkpoint(model=single).read(path).assert_consumed()
    assert_outputs_close(single(images, training=False),
                         run_on_replicas(strategy, restored, images,
                                         training=False))


def test_moving_statistics_stay_identical_across_replicas(
        two_replica_strategy):
    strategy = two_replica_strategy
    images = random_images(GLOBAL_BATCH)
    model = build_in_scope(strategy, images)
    single = single_device_copy(model, images)
    run_on_replicas(strategy, model, images, training=True)
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


def test_sync_batch_norm_trains_like_one_device(two_replica_strategy):
    strategy = two_replica_strategy
    images = random_images(GLOBAL_BATCH)
    model = build_in_scope(strategy, images, sync_batch_norm=True)
    single = single_device_copy(model, images)
    distributed = run_on_replicas(strategy, model, images, training=True)
    assert_outputs_close(single(images, training=True), distributed)
    for sync_norm, norm in zip(model.trunk.batch_norm_layers(),
                               single.trunk.batch_norm_layers()):
        assert_close(norm.moving_mean.numpy(), sync_norm.moving_mean.numpy(), norm.name)
        assert_close(norm.moving_variance.numpy(), sync_norm.moving_variance.numpy(),
                     norm.name)
