"""`StepRunner` on a method without a model (its step a sum of its batch), over two replicas:
``prepare`` runs in each replica on that replica's share before the step, the replicas'
metric shares add up to the global batch's mean, each step reads the next global batch, and
the host hears of each step. (The methods' own steps over two replicas:
methods/test_fixmatch.py in make test, the others in make test-all.)"""

import numpy as np
import tensorflow as tf

from llp_tf.training.methods import StepRunner

G = 8  # global batch: 4 examples a replica


class _Summing:
    """A duck-typed method: its step returns the sum of its batch's "x" over the global batch
    size and its replica's id, as shares whose sum over the replicas is the metric."""

    name, phases = "summing", ("sum",)

    def __init__(self, strategy):
        self.strategy = strategy

    def metric_names(self, phase):
        return ("mean", "replicas")

    def replica_step(self, phase):
        def step(batch):
            context = tf.distribute.get_replica_context()
            return {"mean": tf.reduce_sum(batch["x"]) / G,
                    "replicas": tf.cast(context.replica_id_in_sync_group, tf.float32)}
        return step


def _prepare(batch):
    """What a device-side finish does: a function of the replica's own share (x 10 plus the
    replica id, so that a share prepared on the host or in another replica would show)."""
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    return dict(batch, x=batch["x"] * 10.0 + tf.cast(replica, tf.float32))


def test_prepare_runs_in_each_replica_before_the_step(two_replica_strategy):
    strategy = two_replica_strategy
    x = np.arange(3 * G, dtype=np.float32)
    dataset = tf.data.Dataset.from_tensor_slices({"x": x})
    iterator = iter(strategy.distribute_datasets_from_function(
        lambda context: dataset.batch(G // 2, drop_remainder=True),
        tf.distribute.InputOptions(experimental_fetch_to_device=False)))
    done = []
    metrics = StepRunner(_Summing(strategy), _prepare).run(iterator, 3, "sum",
                                                          on_step=done.append)
    assert done == [1, 2, 3]
    # Replica r reads the r-th consecutive share of each global batch.
    steps = x.reshape(3, 2, G // 2)
    want = (10.0 * steps.sum(axis=(1, 2)) + (G // 2) * 1.0) / G
    np.testing.assert_allclose(metrics["mean"], want, rtol=1e-6)
    np.testing.assert_array_equal(metrics["replicas"], [1.0, 1.0, 1.0])  # 0 + 1
    plain = iter(strategy.distribute_datasets_from_function(
        lambda context: dataset.batch(G // 2, drop_remainder=True),
        tf.distribute.InputOptions(experimental_fetch_to_device=False)))
    np.testing.assert_allclose(StepRunner(_Summing(strategy)).run(plain, 3, "sum")["mean"],
                               steps.sum(axis=(1, 2)) / G, rtol=1e-6)
