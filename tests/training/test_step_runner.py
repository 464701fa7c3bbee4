"""`StepRunner` on a method without a model (its step the means of its batch), over two
replicas: ``prepare`` runs in each replica on that replica's share before the step, each
metric's shares add up to the global batch's mean (a batch mean, a per-replica value, a subset
mean with its weight), each step reads the next global batch, and the host hears of each
step. (The methods' own steps over two replicas: methods/test_fixmatch.py in make test, the
others in make test-all.)"""

import numpy as np
import tensorflow as tf

from llp_tf.training.methods import StepRunner
from llp_tf.training.step_metrics import (
    Mean, SubsetMean, batch_mean, replica_value, subset_mean)
from tests.replica_batches import replica_iterator

G = 8  # global batch: 4 examples a replica
LARGE = 100.0  # the subset: prepared values of at least this


class _Means:
    """A duck-typed method: its step's metrics are the mean of its batch's "x", its replica's
    id, and the mean of "x" over the rows of at least `LARGE`."""

    name, PHASES = "means", ("means",)

    def __init__(self, strategy):
        self.strategy = strategy

    def metric_kinds(self, phase):
        return {"mean": Mean, "replica": Mean, "large": SubsetMean}

    def replica_step(self, phase):
        def step(batch):
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            return {"mean": batch_mean(batch["x"]),
                    "replica": replica_value(tf.cast(replica, tf.float32)),
                    "large": subset_mean(batch["x"], batch["x"] >= LARGE)}
        return step


def _prepare(batch):
    """What a device-side finish does: a function of the replica's own share (x 10 plus the
    replica id, so that a share prepared on the host or in another replica would show)."""
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    return dict(batch, x=batch["x"] * 10.0 + tf.cast(replica, tf.float32))


def _iterator(strategy, x):
    return replica_iterator(strategy, tf.data.Dataset.from_tensor_slices({"x": x}).batch(
        G // 2, drop_remainder=True))


def test_prepare_runs_in_each_replica_before_the_step(two_replica_strategy):
    strategy = two_replica_strategy
    x = np.arange(3 * G, dtype=np.float32)
    done = []
    records = StepRunner(_Means(strategy), _prepare).run(_iterator(strategy, x), 3, "means",
                                                        on_step=done.append)
    assert done == [1, 2, 3]
    # Replica r reads the r-th consecutive share of each global batch.
    prepared = x.reshape(3, 2, G // 2).astype(np.float64) * 10.0 + np.array([0.0, 1.0])[:, None]
    np.testing.assert_allclose(records.values["mean"], prepared.mean(axis=(1, 2)), rtol=1e-6)
    np.testing.assert_array_equal(records.values["replica"], [0.5, 0.5, 0.5])  # (0 + 1) / 2
    large = prepared >= LARGE
    # Per step: the subset's sum and rows, each over the global batch.
    np.testing.assert_allclose(records.values["large"],
                               (prepared * large).sum(axis=(1, 2)) / G, rtol=1e-6)
    np.testing.assert_allclose(records.weights["large"], large.sum(axis=(1, 2)) / G, rtol=1e-6)
    # Over the steps: the mean over every step's rows of the subset (none in the first).
    assert large[0].sum() == 0
    np.testing.assert_allclose(records.means()["large"], prepared[large].mean(), rtol=1e-6)
    plain = StepRunner(_Means(strategy)).run(_iterator(strategy, x), 3, "means")
    np.testing.assert_allclose(plain.values["mean"], x.reshape(3, G).mean(axis=1), rtol=1e-6)
