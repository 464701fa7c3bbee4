"""Training input built on tf.data service workers (``--input_service``).

With a dispatcher address, each input pipeline's training dataset (see
`llp_tf.data.pipeline`) is built and run by the tf.data service workers
registered with that dispatcher, not by the training process; the trainer
only receives finished batches over gRPC. Evaluation input stays local.

How the work is split. The service shards statically
(`tf.data.experimental.service.ShardingPolicy.HINT`): the dispatcher must
list its N workers (``DispatcherConfig(worker_addresses=...)``, as
tools/input_service.py does), and the shard hint in `served_steps` becomes
``shard(N, w)`` on worker w. It stands over the pipeline's *steps*: the
record stream is cut into steps of ``R b`` records (R replicas of this
pipeline, b per replica), and worker w decodes and augments steps w, w + N,
w + 2N, ... of the epoch. A service element is one whole step, the R
per-replica batches stacked, and the trainer unstacks it, so a step's R
batches always travel together and reach the replicas in replica order.

What stays deterministic (measured in tests/data/test_data_service.py):

- Every step's contents, with any number of service workers: the same
  examples, labels, indices and pixels as the local pipeline's step, since
  each example is still a stateless function of (seed, epoch, pass,
  example) and the step's records are cut from the same epoch order.
- With one service worker: everything; the dataset yields exactly the local
  pipeline's elements in the local order.
- With N > 1 workers: the multiset of steps of an epoch (every step exactly
  once, none twice). Each worker's own steps arrive in their order, but the
  client interleaves the workers first come, first served, so the order of
  steps within the epoch varies from run to run. Given up with it: a
  bit-identical rerun; a resume inside an epoch that trains exactly the
  steps not yet trained (``start_step`` skips the first steps of the epoch
  order, not the ones that happened to arrive first); and, with several
  training processes, the pairing of their parts of a global batch (each
  process's job interleaves on its own). Indices stay distinct within a
  global batch wherever a pass is one epoch, as for LLP.

Each service worker reads the whole record stream of the pipeline it serves
(cheap for image folders, whose records are paths; the encoded bytes of
TFRecord shards) but decodes and augments only its steps. Workers read the
dataset's files by the trainer's paths, so they must see the same files.
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
      make_examples: records -> training elements {"image": float32 [S, S,
        3], "label": int64 [], "index": int64 []}, one per record in order;
        it runs on the service workers.
      per_replica: int b, examples per replica batch.
      replicas: int R, replicas this pipeline feeds.
      address: the dispatcher, ``host:port`` or ``grpc://host:port``.

    Returns:
      tf.data.Dataset of {"image": float32 [b, S, S, 3], "label": int64 [b],
      "index": int64 [b]}: the local pipeline's per-replica batches, in its
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
