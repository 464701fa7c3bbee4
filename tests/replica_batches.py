"""The distributed iterator the step tests feed a `StepRunner`: a stream of per-replica
batches dealt out as the training pipeline deals them (replica r of R takes batches r, r + R,
r + 2R, ...: consecutive per-replica batches make up one global batch), on the host.

Each replica reads its own `tf.data` iterator (`InputReplicationMode.PER_REPLICA`, no
per-device prefetch) with tf.data's autotuning off. With the default per-worker input, each
device's prefetching iterator autotunes, and deleting it waits for its tuning thread's next
round, up to a minute once the iterator has lived that long: the multi-replica step tests
waited there for most of their time (docs/testing.md).
"""

import tensorflow as tf


def replica_iterator(strategy: tf.distribute.Strategy,
                     batches: tf.data.Dataset) -> tf.distribute.DistributedIterator:
    """An iterator of ``strategy``'s per-replica values, replica r's the batches of ``batches``
    (per-replica batches, any structure) at r, r + R, r + 2R, ... for R replicas. The
    strategy's default input stays as it was (tests/test_replica_batches.py)."""
    replicas = strategy.num_replicas_in_sync
    options = tf.data.Options()
    options.autotune.enabled = False
    # MirroredStrategy keeps the input workers of a per-replica input as its own, so that its
    # later default inputs would give each replica a whole copy: put its own back.
    default_workers = getattr(strategy.extended, "_input_workers_devices", None)
    try:
        return iter(strategy.distribute_datasets_from_function(
            lambda context: batches.shard(replicas, context.input_pipeline_id).with_options(
                options),
            tf.distribute.InputOptions(
                experimental_fetch_to_device=False,
                experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA)))
    finally:
        if default_workers is not None:
            strategy.extended._input_workers_devices = default_workers
