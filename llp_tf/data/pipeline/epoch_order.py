"""The training order of one epoch: which used example comes at which position.

The order depends only on the source, ``used_index``, ``seed``, ``epoch``
and the pass (never on the number of replicas or workers, on timing, or on
TensorFlow's global seed). One pass over the used examples (`train_order`):

1. shards in a permutation drawn from ``numpy.random.default_rng([seed,
   epoch, pass])``, read ``cycle_length`` at a time, interleaved record by
   record;
2. records outside ``used_index`` dropped;
3. a block shuffle: consecutive blocks of ``shuffle_block`` records (the whole
   split for sources whose records are file paths) are each permuted by a
   stateless random permutation seeded by (seed, epoch, pass, block).

An epoch (`epoch_records`) is pass 0, then passes 1, 2, ... while it asks
for more records, each in its own order; with ``cache_passes`` the used
records are read once, in pass 0's read order, and every pass permutes all
of them (`cached_passes`). Every record gains ``dense_index`` (int64 []: the
original index, or its position in ``used_index``, the bank row) and
``pass`` (int64 []). Each random decision of an epoch (shuffles here,
augmentation in `llp_tf.data.pipeline.input_fns`) has its own seed tag (`augment_seed`).
"""

import numpy as np
import tensorflow as tf

from llp_tf.data.sources.base import TRAIN, Source
from llp_tf.data.splits.regime import check_index_set
from llp_tf.errors import ConfigError
from llp_tf.tensor_types import Array, IntTensor

DEFAULT_CYCLE_LENGTH = 16
# Tags that keep the seeds of different random decisions apart.
_SHUFFLE_TAG = 1
_AUGMENT_TAG = 2


def _epoch_seed(seed, epoch, tag):
    """int32 [2] stateless seed of one kind of random decision in one epoch."""
    base = tf.constant([int(seed), tag], tf.int64)
    return tf.random.experimental.stateless_fold_in(base, int(epoch))


def augment_seed(seed: int, epoch: int) -> IntTensor:
    """int32 [2] seed of an epoch's augmentation (pass and example are folded in later)."""
    return _epoch_seed(seed, epoch, _AUGMENT_TAG)


def check_seed_epoch(seed: int, epoch: int) -> None:
    """Raises ConfigError unless ``seed`` and ``epoch`` are integers >= 0."""
    for name, value in (("seed", seed), ("epoch", epoch)):
        if not isinstance(value, (int, np.integer)) or value < 0:
            raise ConfigError(f"{name} must be an integer >= 0; got {value!r}.")


def _block_shuffle(records, block, seed, pass_index):
    """Permutes each block of ``block`` consecutive records (stateless, seeded);
    sets ``pass`` to ``pass_index`` (int64 []) and, where records have none,
    ``dense_index`` to ``index`` (per block: no function call per record)."""
    def permute(block_id, block_records):
        size = tf.shape(block_records["index"])[0]
        block_seed = tf.random.experimental.stateless_fold_in(seed, block_id)
        order = tf.argsort(tf.random.stateless_uniform([size], block_seed))
        block_records = dict(block_records, **{"pass": tf.fill([size], pass_index)})
        block_records.setdefault("dense_index", block_records["index"])
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


def _shared_dense_table(source, used_index):
    """int64 [N] tensor of `_dense_map` that several passes share, or None."""
    dense = _dense_map(source, used_index)
    return None if dense is None else tf.constant(dense)


def _used_records(source, seed, epoch, used_index, cycle_length, pass_index, dense_table):
    """Records of the used examples in the pass's shard order, before the block shuffle.

    With ``used_index`` each record gains ``dense_index`` (int64 []); without,
    `_block_shuffle` adds it. Returns (dataset, number of used examples).
    """
    check_seed_epoch(seed, epoch)
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
    if dense is not None:
        if dense_table is None:
            dense_table = tf.constant(dense)
        records = records.map(lambda r: dict(r, dense_index=tf.gather(dense_table, r["index"])))
        records = records.filter(lambda r: r["dense_index"] >= 0)
    return records, num_used


def _pass_shuffle_seed(seed, epoch, pass_index):
    """int64 [2] seed of pass ``pass_index`` (int or int64 tensor) of an epoch's shuffle."""
    return tf.random.experimental.stateless_fold_in(
        _epoch_seed(seed, epoch, _SHUFFLE_TAG), tf.cast(pass_index, tf.int64))


def train_order(source: Source, seed: int, epoch: int, used_index: Array | None = None,
                cycle_length: int = DEFAULT_CYCLE_LENGTH, shuffle_block: int | None = None,
                pass_index: int = 0, dense_table: IntTensor | None = None) -> tf.data.Dataset:
    """Records of one pass over the used examples in their training order.

    Returns a tf.data.Dataset of records (see `llp_tf.data.sources.base`) plus
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
                          _pass_shuffle_seed(seed, epoch, pass_index),
                          tf.constant(int(pass_index), tf.int64))


def cached_passes(cached_records: tf.data.Dataset, num_used: int, seed: int, epoch: int,
                  first_pass: int, last_pass: int) -> tf.data.Dataset:
    """Passes ``first_pass..last_pass`` of an epoch, each one permutation of all cached records.

    Args:
      cached_records: the `_used_records` of pass 0 behind a ``cache()``, so
        that every pass permutes records held in memory.
      num_used: int, how many records it holds.

    One dataset of all the passes (not a concatenation of one per pass, whose
    construction cost grows with the number of passes).
    """
    def one_pass(pass_index):
        return _block_shuffle(cached_records, num_used,
                              _pass_shuffle_seed(seed, epoch, pass_index), pass_index)

    return tf.data.Dataset.range(first_pass, last_pass + 1).flat_map(one_pass)


def epoch_records(source: Source, seed: int, epoch: int, begin: int, end: int,
                  global_batch_size: int, pass_records: int, used_index: Array | None = None,
                  cycle_length: int = DEFAULT_CYCLE_LENGTH, shuffle_block: int | None = None,
                  cache_passes: bool = False) -> tf.data.Dataset:
    """Records of global batches [begin, end) of an epoch, pass after pass.

    Record r of the epoch is record ``r mod pass_records`` of pass ``r //
    pass_records`` (in the order of `train_order`, or of `cached_passes`
    with ``cache_passes``).

    Args:
      source, seed, epoch, used_index, cycle_length, shuffle_block: as
        `train_order`.
      begin, end: int, the epoch's first global batch and the one after its
        last.
      global_batch_size: int G.
      pass_records: int, records taken from each pass: whole batches of the
        used examples, or every used example (then a global batch may span
        two passes and hold an example twice).
      cache_passes: read the used records once (pass 0's read order, wherever
        the epoch begins) and make every pass a permutation of all of them.

    Returns:
      tf.data.Dataset of ``(end - begin) G`` records (none if end <= begin).
    """
    dense_table = _shared_dense_table(source, used_index)
    if begin >= end:
        return train_order(source, seed, epoch, used_index, cycle_length,
                           shuffle_block, dense_table=dense_table).take(0)
    first, last = begin * global_batch_size, end * global_batch_size
    first_pass, last_pass = first // pass_records, (last - 1) // pass_records
    if cache_passes:
        # Pass 0's read order whatever pass a resume starts in, so that a
        # pass's order does not depend on where the epoch began.
        cached, num_used = _used_records(source, seed, epoch, used_index, cycle_length, 0,
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
