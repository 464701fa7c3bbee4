"""The training order of one epoch: which used example comes at which position.

The order depends only on the source, ``used_index``, ``seed``, ``epoch`` and the pass, never
on the replicas, workers or timing. A pass (`train_order`) reads the shards in a seeded
permutation, interleaved, drops records outside ``used_index`` and permutes each block of
``shuffle_block`` records; an epoch (`epoch_records`) runs passes 0, 1, ... while it needs
records."""

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
    """Each block of ``block`` records permuted by a stateless seed, with ``pass`` and (where
    missing) ``dense_index`` = ``index`` set."""
    def permute(block_id, block_records):
        size = tf.shape(block_records["index"])[0]
        block_seed = tf.random.experimental.stateless_fold_in(seed, block_id)
        order = tf.argsort(tf.random.stateless_uniform([size], block_seed))
        block_records = dict(block_records, **{"pass": tf.fill([size], pass_index)})
        block_records.setdefault("dense_index", block_records["index"])
        return tf.nest.map_structure(lambda t: tf.gather(t, order), block_records)

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
    """(records of the used examples in the pass's shard order, each with ``dense_index`` when
    ``used_index`` is given; their number)."""
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
    """int64 [2] seed of pass ``pass_index`` of an epoch's shuffle."""
    return tf.random.experimental.stateless_fold_in(
        _epoch_seed(seed, epoch, _SHUFFLE_TAG), tf.cast(pass_index, tf.int64))


def train_order(source: Source, seed: int, epoch: int, used_index: Array | None = None,
                cycle_length: int = DEFAULT_CYCLE_LENGTH, shuffle_block: int | None = None,
                pass_index: int = 0, dense_table: IntTensor | None = None) -> tf.data.Dataset:
    """Dataset of one pass's records in training order, every used example once, each with
    ``dense_index`` (int64 [], its bank row) and ``pass`` (int64 []); passes share
    ``dense_table`` (int64 [N] of `_dense_map`) if given."""
    records, num_used = _used_records(source, seed, epoch, used_index, cycle_length,
                                      pass_index, dense_table)
    block = shuffle_block or source.shuffle_block or num_used
    return _block_shuffle(records, max(1, min(block, num_used)),
                          _pass_shuffle_seed(seed, epoch, pass_index),
                          tf.constant(int(pass_index), tf.int64))


def cached_passes(cached_records: tf.data.Dataset, num_used: int, seed: int, epoch: int,
                  first_pass: int, last_pass: int) -> tf.data.Dataset:
    """One dataset of passes ``first_pass..last_pass``, each a permutation of all ``num_used``
    ``cached_records`` (pass 0's `_used_records` behind a ``cache()``)."""
    def one_pass(pass_index):
        return _block_shuffle(cached_records, num_used,
                              _pass_shuffle_seed(seed, epoch, pass_index), pass_index)

    return tf.data.Dataset.range(first_pass, last_pass + 1).flat_map(one_pass)


def epoch_records(source: Source, seed: int, epoch: int, begin: int, end: int,
                  global_batch_size: int, pass_records: int, used_index: Array | None = None,
                  cycle_length: int = DEFAULT_CYCLE_LENGTH, shuffle_block: int | None = None,
                  cache_passes: bool = False) -> tf.data.Dataset:
    """Dataset of the ``(end - begin) G`` records of global batches [begin, end) of an epoch:
    record r is record ``r mod pass_records`` of pass ``r // pass_records`` (`train_order`, or
    `cached_passes` with ``cache_passes``). ``pass_records`` is whole batches of the used
    examples, or all of them (then a global batch may span two passes and hold an example
    twice)."""
    dense_table = _shared_dense_table(source, used_index)
    if begin >= end:
        return train_order(source, seed, epoch, used_index, cycle_length,
                           shuffle_block, dense_table=dense_table).take(0)
    first, last = begin * global_batch_size, end * global_batch_size
    first_pass, last_pass = first // pass_records, (last - 1) // pass_records
    if cache_passes:
        # Pass 0's read order, wherever a resume starts.
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
