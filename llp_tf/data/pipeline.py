"""Input pipelines: ``input_fn(input_context)`` for training and evaluation.

Both functions return an ``input_fn`` for
``strategy.distribute_datasets_from_function`` (or to call with None for one
replica). Each input pipeline (worker) gets a dataset batched at the
per-replica batch size b = global batch / replicas; the strategy hands a
worker's consecutive batches to its replicas in turn, so one step's
per-replica batches, concatenated in replica order, are the global batch.

Training, one epoch. The examples are put in one order that depends only on
the source, ``used_index``, ``seed`` and ``epoch`` (never on the number of
replicas or workers, on timing, or on TensorFlow's global seed):

1. shards in a permutation drawn from ``numpy.random.default_rng([seed,
   epoch])``, read ``cycle_length`` at a time, interleaved record by record;
2. records outside ``used_index`` dropped;
3. a block shuffle: consecutive blocks of ``shuffle_block`` records (the whole
   split for sources whose records are file paths) are each permuted by a
   stateless random permutation seeded by (seed, epoch, block).

Global batch k is elements ``[k G, (k + 1) G)`` of that order; there are
``floor(N_used / G)`` of them (the remainder is dropped so that shapes are
static and the indices of a global batch distinct), and the dataset starts
after ``start_step`` of them. With W workers, worker w reads the same order
and keeps the w-th of W equal parts of each global batch. Each example is
then decoded and augmented with a stateless seed made of (seed, epoch, pass,
the example's original index), so its image is the same whatever the replica
count, the parallelism, or where the epoch was resumed. (An epoch is one pass
unless ``steps`` asks for more or fewer batches.)

Elements: {"image": float32 [b, S, S, 3], "label": int64 [b], "index": int64
[b]}; ``index`` is the example's original index, or with ``used_index`` its
position in ``used_index`` (``np.searchsorted(used_index, original)``), the
bank row.

Evaluation: every example of the split exactly once, in a fixed order. The
split is padded with copies of its first example up to a whole number of
global batches, so every step has full static-shape batches on every
replica; ``mask`` (bool [b]) is False for the padding. Elements:
{"image": float32 [b, S, S, 3], "label": int64 [b], "index": int64 [b],
"mask": bool [b]}.

Iterate inside `llp_tf.data.data_errors()` to get a `DataError` naming the
file, or shard and record, of an image that cannot be decoded.
"""

import numpy as np
import tensorflow as tf

from llp_tf.data import augment
from llp_tf.data.source import TRAIN, VALIDATION
from llp_tf.data.splits import check_index_set
from llp_tf.errors import ConfigError

DEFAULT_CYCLE_LENGTH = 16
# Tags that keep the seeds of different random decisions apart.
_SHUFFLE_TAG = 1
_AUGMENT_TAG = 2


def _epoch_seed(seed, epoch, tag):
    """int64 [2] stateless seed of one kind of random decision in one epoch."""
    base = tf.constant([int(seed), tag], tf.int64)
    return tf.random.experimental.stateless_fold_in(base, int(epoch))


def _check_positive(name, value):
    if not isinstance(value, (int, np.integer)) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer; got {value!r}.")


def _check_seed_epoch(seed, epoch):
    for name, value in (("seed", seed), ("epoch", epoch)):
        if not isinstance(value, (int, np.integer)) or value < 0:
            raise ConfigError(f"{name} must be an integer >= 0; got {value!r}.")


def steps_per_epoch(num_used, global_batch_size):
    """int: global batches of one training epoch, ``floor(num_used / G)``."""
    return int(num_used) // int(global_batch_size)


def eval_steps(num_examples, global_batch_size):
    """int: global batches of an evaluation pass, ``ceil(num_examples / G)``."""
    return -(-int(num_examples) // int(global_batch_size))


def _batch_layout(global_batch_size, input_context):
    """(per-replica batch b, number of input pipelines W, this pipeline's id)."""
    if input_context is None:
        return int(global_batch_size), 1, 0
    replicas = input_context.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ConfigError(
            f"The global batch size {global_batch_size} does not split evenly over "
            f"{replicas} replicas; choose a multiple of {replicas}.")
    return (input_context.get_per_replica_batch_size(int(global_batch_size)),
            input_context.num_input_pipelines, input_context.input_pipeline_id)


def _keep_worker_part(dataset, global_batch_size, num_pipelines, pipeline_id):
    """Keeps this worker's part of every global batch of an element stream."""
    if num_pipelines == 1:
        return dataset
    part = global_batch_size // num_pipelines
    return dataset.batch(part, drop_remainder=True).shard(num_pipelines, pipeline_id).unbatch()


def _options():
    options = tf.data.Options()
    options.deterministic = True
    # The dataset is already this worker's part; auto-sharding would cut it again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


def _block_shuffle(records, block, seed):
    """Permutes each block of ``block`` consecutive records (stateless, seeded)."""
    def permute(block_id, block_records):
        size = tf.shape(block_records["index"])[0]
        block_seed = tf.random.experimental.stateless_fold_in(seed, block_id)
        order = tf.argsort(tf.random.stateless_uniform([size], block_seed))
        return tf.nest.map_structure(lambda t: tf.gather(t, order), block_records)

    # prefetch(1): the next block is read while this one is consumed.
    return records.batch(block).enumerate().map(permute).prefetch(1).unbatch()


def _dense_map(source, used_index):
    """int64 [N] dense position of each original index, -1 if unused, or None."""
    if used_index is None:
        return None
    num_train = source.info.num_train
    used_index = check_index_set("used_index", used_index, num_train)
    if used_index.size == 0:
        raise ConfigError("used_index is empty; nothing to train on.")
    dense = np.full(num_train, -1, np.int64)
    dense[used_index] = np.arange(used_index.size, dtype=np.int64)
    return dense


def _used_records(source, seed, epoch, used_index, cycle_length, pass_index, dense_table):
    """Records of the used examples in the pass's shard order, before the block shuffle.

    Each record gains ``dense_index`` (int64 []) and ``pass`` (int64 [],
    ``pass_index``). Returns (dataset, number of used examples).
    """
    _check_seed_epoch(seed, epoch)
    source.require_split(TRAIN)
    dense = _dense_map(source, used_index)
    num_used = source.info.num_train if dense is None else int(np.sum(dense >= 0))
    num_shards = source.num_shards(TRAIN)
    shard_order = np.random.default_rng(
        [int(seed), int(epoch), int(pass_index)]).permutation(num_shards)
    records = tf.data.Dataset.from_tensor_slices(shard_order.astype(np.int64)).interleave(
        lambda shard: source.read_shard(TRAIN, shard),
        cycle_length=max(1, min(cycle_length, num_shards)), block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    pass_tensor = tf.constant(int(pass_index), tf.int64)
    if dense is None:
        records = records.map(lambda r: dict(r, dense_index=r["index"], **{"pass": pass_tensor}))
    else:
        if dense_table is None:
            dense_table = tf.constant(dense)
        records = records.map(lambda r: dict(r, dense_index=tf.gather(dense_table, r["index"]),
                                             **{"pass": pass_tensor}))
        records = records.filter(lambda r: r["dense_index"] >= 0)
    return records, num_used


def _pass_shuffle_seed(seed, epoch, pass_index):
    """int64 [2] seed of pass ``pass_index`` (int or int64 tensor) of an epoch's shuffle."""
    return tf.random.experimental.stateless_fold_in(
        _epoch_seed(seed, epoch, _SHUFFLE_TAG), tf.cast(pass_index, tf.int64))


def train_order(source, seed, epoch, used_index=None, cycle_length=DEFAULT_CYCLE_LENGTH,
                shuffle_block=None, pass_index=0, dense_table=None):
    """Records of one pass over the used examples in their training order.

    Returns a tf.data.Dataset of records (see `llp_tf.data.source`) plus
    ``dense_index`` (int64 [], the index the pipeline yields) and ``pass``
    (int64 [], ``pass_index``). All of the used examples are there once; the
    pipeline drops the remainder. Pass p of an epoch has its own order.
    ``dense_table`` (int64 [N] tensor of `_dense_map`) lets several passes
    share one table instead of embedding a copy each.
    """
    records, num_used = _used_records(source, seed, epoch, used_index, cycle_length,
                                      pass_index, dense_table)
    block = shuffle_block or source.shuffle_block or num_used
    return _block_shuffle(records, max(1, min(block, num_used)),
                          _pass_shuffle_seed(seed, epoch, pass_index))


def cached_passes(cached_records, num_used, seed, epoch, first_pass, last_pass):
    """Passes ``first_pass..last_pass`` of an epoch, each one permutation of all cached records.

    Args:
      cached_records: the `_used_records` of pass 0 behind a ``cache()``, so
        that every pass permutes records held in memory.
      num_used: int, how many records it holds.

    One dataset of all the passes (not a concatenation of one per pass, whose
    construction cost grows with the number of passes).
    """
    def one_pass(pass_index):
        records = cached_records.map(lambda r: dict(r, **{"pass": pass_index}))
        return _block_shuffle(records, num_used, _pass_shuffle_seed(seed, epoch, pass_index))

    return tf.data.Dataset.range(first_pass, last_pass + 1).flat_map(one_pass)


def make_train_input_fn(source, global_batch_size, image_size, seed, epoch, start_step=0,
                        used_index=None, steps=None, cycle_length=DEFAULT_CYCLE_LENGTH,
                        shuffle_block=None, batches_cross_passes=False,
                        augmentation="paper", cache_passes=False,
                        min_crop_area=augment.CROP_AREA_RANGE[0]):
    """``input_fn(input_context=None)`` for one training epoch (see the module docstring).

    Args:
      source: a `llp_tf.data.Source`.
      global_batch_size: int G, split evenly over the replicas.
      image_size: int S, side of the augmented images.
      seed: int, the run's seed.
      epoch: int >= 0, selects the epoch's order and augmentation.
      start_step: int, global batches of this epoch already done (resume).
      used_index: optional sorted int64 [U]: train only on these examples and
        yield their positions in it as ``index``.
      steps: optional int, global batches in this epoch; default one pass,
        ``steps_per_epoch(N_used, G)``. Fewer: the first ``steps`` batches of
        the pass. More: further passes follow, pass p in its own order and with
        its own augmentation (seeded by (seed, epoch, p)), each of whole
        batches only, so a global batch never holds an example twice.
      cycle_length: shards read at once.
      shuffle_block: records per shuffle block; default the source's.
      batches_cross_passes: with ``steps``, let passes run into each other
        (every example of a pass, then the next pass), so a global batch may
        span two passes and hold an example twice. This lets a set smaller
        than one batch be trained on (the supervised baseline's labelled
        set); it is wrong wherever examples index a memory bank.
      augmentation: the `augment.train_augment` policy, "paper" or "light".
      min_crop_area: float in (0, 1], the smallest random-crop area fraction.
      cache_passes: read the used records once per epoch and hold them in
        memory; every pass is then one permutation of all of them (instead of
        a new read in its own shard order and block shuffle). For a small
        used set trained for many passes (the supervised baseline's labelled
        set) this avoids reading and filtering the whole split on every pass;
        memory grows with the used records' encoded size.

    Returns:
      input_fn(input_context or None) -> tf.data.Dataset of
      {"image": float32 [b, S, S, 3], "label": int64 [b], "index": int64 [b]}
      with ``steps - start_step`` elements per replica.
    """
    _check_seed_epoch(seed, epoch)
    _check_positive("global_batch_size", global_batch_size)
    _check_positive("image_size", image_size)
    try:
        augment.check_policy(augmentation, min_crop_area)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    source.require_split(TRAIN)
    if used_index is not None:
        used_index = check_index_set("used_index", used_index, source.info.num_train)
    num_used = source.info.num_train if used_index is None else used_index.size
    steps_per_pass = steps_per_epoch(num_used, global_batch_size)
    if batches_cross_passes and steps is None:
        raise ConfigError("batches_cross_passes needs an explicit number of steps.")
    if steps_per_pass == 0 and not batches_cross_passes:
        raise ConfigError(
            f"The global batch size {global_batch_size} is larger than the {num_used} "
            f"training examples used from {source.info.name}; an epoch would have no step.")
    if steps is None:
        steps = steps_per_pass
    elif not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ConfigError(f"steps must be an integer >= 0; got {steps!r}.")
    if not isinstance(start_step, (int, np.integer)) or not 0 <= start_step <= steps:
        raise ConfigError(f"start_step must lie in [0, {steps}] (steps per epoch); got "
                          f"{start_step!r}.")
    augment_seed = _epoch_seed(seed, epoch, _AUGMENT_TAG)

    def train_element(record, image):
        pass_seed = tf.random.experimental.stateless_fold_in(augment_seed, record["pass"])
        example_seed = tf.random.experimental.stateless_fold_in(pass_seed, record["index"])
        return {"image": augment.train_augment(image, example_seed, image_size, augmentation,
                                               min_crop_area),
                "label": record["label"], "index": record["dense_index"]}

    # Records per pass: whole batches only, or every used example.
    pass_records = num_used if batches_cross_passes else steps_per_pass * global_batch_size

    def shared_dense_table():
        dense = _dense_map(source, used_index)
        return None if dense is None else tf.constant(dense)

    def passes(begin, end, dense_table):
        """Records of global batches [begin, end) of the epoch, pass by pass."""
        if begin >= end:
            return train_order(source, seed, epoch, used_index, cycle_length,
                               shuffle_block, dense_table=dense_table).take(0)
        first, last = begin * global_batch_size, end * global_batch_size
        first_pass, last_pass = first // pass_records, (last - 1) // pass_records
        if cache_passes:
            # Pass 0's read order whatever pass a resume starts in, so that a
            # pass's order does not depend on where the epoch began.
            cached, _ = _used_records(source, seed, epoch, used_index, cycle_length, 0,
                                      dense_table)
            records = cached_passes(cached.cache(), num_used, seed, epoch, first_pass, last_pass)
            return records.skip(first - first_pass * pass_records).take(last - first)
        records = None
        for pass_index in range(first_pass, last_pass + 1):
            start = pass_index * pass_records
            low, high = max(first, start) - start, min(last, start + pass_records) - start
            part = train_order(source, seed, epoch, used_index, cycle_length,
                               shuffle_block, pass_index, dense_table)
            part = part.take(high).skip(low)
            records = part if records is None else records.concatenate(part)
        return records

    def input_fn(input_context=None):
        per_replica, num_pipelines, pipeline_id = _batch_layout(global_batch_size, input_context)
        records = passes(start_step, steps, shared_dense_table())
        records = _keep_worker_part(records, global_batch_size, num_pipelines, pipeline_id)
        examples = source.decode(records, TRAIN).map(
            train_element, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        dataset = examples.batch(per_replica, drop_remainder=True)
        return dataset.prefetch(tf.data.AUTOTUNE).with_options(_options())

    return input_fn


def make_eval_input_fn(source, global_batch_size, image_size, split=VALIDATION,
                       cycle_length=DEFAULT_CYCLE_LENGTH):
    """``input_fn(input_context=None)`` for one pass over ``split`` (see the module
    docstring).

    Returns:
      input_fn(input_context or None) -> tf.data.Dataset of
      {"image": float32 [b, S, S, 3], "label": int64 [b], "index": int64 [b],
      "mask": bool [b]} with ``eval_steps(N, G)`` elements per replica; the
      examples with mask True are every example of the split once.
    """
    _check_positive("global_batch_size", global_batch_size)
    _check_positive("image_size", image_size)
    source.require_split(split)
    num_examples = source.info.num_examples(split)
    steps = eval_steps(num_examples, global_batch_size)
    padding = steps * global_batch_size - num_examples

    def eval_element(record, image):
        return {"image": augment.eval_preprocess(image, image_size), "label": record["label"],
                "index": record["index"], "mask": record["mask"]}

    def input_fn(input_context=None):
        per_replica, num_pipelines, pipeline_id = _batch_layout(global_batch_size, input_context)
        records = source.records(split, cycle_length).map(lambda r: dict(r, mask=True))
        pads = records.take(1).map(lambda r: dict(r, mask=False)).repeat(padding)
        records = _keep_worker_part(records.concatenate(pads), global_batch_size,
                                    num_pipelines, pipeline_id)
        examples = source.decode(records, split).map(
            eval_element, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        dataset = examples.batch(per_replica, drop_remainder=True)
        return dataset.prefetch(tf.data.AUTOTUNE).with_options(_options())

    return input_fn
