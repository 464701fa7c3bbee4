"""Training input built on tf.data service workers (``--input_service``).

With a dispatcher address, each input pipeline's training dataset (see
`llp_tf.data.pipeline.input_fns`) is built and run by the tf.data service workers
registered with that dispatcher; the trainer only receives finished batches
over gRPC. Evaluation input stays local. Sharding is static
(`ShardingPolicy.HINT`: the dispatcher must list its N workers, as
tools/input_service.py does): worker w builds steps w, w + N, ... of the
epoch, a step being the R per-replica batches of b examples this pipeline
feeds, and sends each step whole; they reach the replicas in replica order.

Guarantees (tests/data/pipeline/test_data_service.py): every step holds the local
pipeline's examples, labels, indices and pixels, and comes exactly once per
epoch; with one service worker the dataset is exactly the local one, in
the local order; with N > 1 the order of the steps within an epoch varies
from run to run. What that gives up, and what workers need: docs/multi-worker.md,
"Remote input workers".
"""

from collections.abc import Callable

import tensorflow as tf

from llp_tf.data.service_address import check_address

def served_steps(records: tf.data.Dataset,
                 make_examples: Callable[[tf.data.Dataset], tf.data.Dataset],
                 per_replica: int, replicas: int, address: str) -> tf.data.Dataset:
    """One input pipeline's training batches, built by the tf.data service.

    Args:
      records: this pipeline's records of the epoch (`epoch_order`), a whole
        number of steps of ``replicas * per_replica`` records.
      make_examples: records -> training elements {"image" (each view's
        key): float32 [S, S, 3], "label": int64 [], "index": int64 []}, one
        per record in order; it runs on the service workers.
      per_replica: int b, examples per replica batch.
      replicas: int R, replicas this pipeline feeds.
      address: the dispatcher, ``host:port`` or ``grpc://host:port``.

    Returns:
      tf.data.Dataset of {"image" (each view's key): float32 [b, S, S, 3],
      "label": int64 [b], "index": int64 [b]}: the local pipeline's per-replica batches, in its
      order with one service worker, whole steps in a varying order with
      several (see the module docstring).

    Raises:
      ConfigError: a malformed address. Later, when iterating: a dispatcher
      without a worker list fails with tf.errors.NotFoundError ("... is not
      in the workers list"); one that cannot be reached is waited for,
      without a time limit (the service client retries).
    """
    service = check_address(address)
    step = per_replica * replicas
    # The hint becomes shard(N workers, w) on worker w: a stride over whole
    # steps, taken before decoding, so each worker decodes only its own steps.
    hint = tf.data.experimental.SHARD_HINT
    own = records.batch(step, drop_remainder=True).shard(hint, hint).unbatch()
    built = make_examples(own).batch(per_replica, drop_remainder=True)
    # One element per step: its R replica batches never part on the way.
    stacked = built.batch(replicas, drop_remainder=True)
    served = stacked.apply(tf.data.experimental.service.distribute(
        processing_mode=tf.data.experimental.service.ShardingPolicy.HINT, service=service))
    return served.unbatch()
