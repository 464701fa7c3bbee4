import numpy as np

from llp_tf.after_training import run_loader
from llp_tf.after_training.probe import linear_probe

NUM_CLASSES = 4


def test_random_trunk_is_seeded_and_untrained(tiny_llp_run):
    config = run_loader.read_config(tiny_llp_run)
    first = linear_probe.random_trunk_model(config, NUM_CLASSES, seed=0)
    again = linear_probe.random_trunk_model(config, NUM_CLASSES, seed=0)
    other = linear_probe.random_trunk_model(config, NUM_CLASSES, seed=1)
    for model in (first, again, other):  # nothing restored: the initial statistics
        assert all(np.all(norm.moving_variance.numpy() == 1.0)
                   for norm in model.trunk.batch_norm_layers())
    kernels = [m.trunk.trainable_weights[0].numpy() for m in (first, again, other)]
    np.testing.assert_array_equal(kernels[0], kernels[1])
    assert not np.array_equal(kernels[0], kernels[2])
