"""Training input built on tf.data service workers (``--input_service``): worker w of the
dispatcher's N listed workers builds steps w, w + N, ... of the epoch and sends each whole
(docs/multi-worker.md, "Remote input workers")."""

from collections.abc import Callable

import tensorflow as tf

from llp_tf.data.service_address import check_address

def served_steps(records: tf.data.Dataset,
                 make_examples: Callable[[tf.data.Dataset], tf.data.Dataset],
                 per_replica: int, replicas: int, address: str) -> tf.data.Dataset:
    """This pipeline's per-replica training batches, built by the tf.data service at
    ``address`` from ``records`` (whole steps of ``replicas`` x ``per_replica``) by
    ``make_examples`` (records -> elements, one each): the local pipeline's batches, in its
    order with one worker. ConfigError for a malformed address; when iterated, NotFoundError
    from a dispatcher without a worker list."""
    service = check_address(address)
    step = per_replica * replicas
    # The hint becomes shard(N, w) on worker w, before decoding.
    hint = tf.data.experimental.SHARD_HINT
    own = records.batch(step, drop_remainder=True).shard(hint, hint).unbatch()
    built = make_examples(own).batch(per_replica, drop_remainder=True)
    stacked = built.batch(replicas, drop_remainder=True)
    served = stacked.apply(tf.data.experimental.service.distribute(
        processing_mode=tf.data.experimental.service.ShardingPolicy.HINT, service=service))
    return served.unbatch()
