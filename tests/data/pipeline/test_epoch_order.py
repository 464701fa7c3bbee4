"""The epoch order: one pass holds every used example once, passes cut into batches,
cached passes, seeds."""

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data.pipeline import epoch_order
from llp_tf.errors import ConfigError

USED = np.array([0, 2, 3, 5, 8, 13, 17, 21, 22, 27, 28], np.int64)


def _fields(dataset, *keys):
    """numpy arrays of the chosen record fields, in dataset order."""
    records = list(dataset.as_numpy_iterator())
    return [np.array([r[key] for r in records], np.int64) for key in keys]


def test_one_pass_holds_every_used_example_once_with_its_bank_row(tfrecord_source):
    index, dense, labels, passes = _fields(
        epoch_order.train_order(tfrecord_source, 3, 0, USED, pass_index=2),
        "index", "dense_index", "label", "pass")
    np.testing.assert_array_equal(np.sort(dense), np.arange(USED.size))
    np.testing.assert_array_equal(index, USED[dense])
    np.testing.assert_array_equal(labels, tfrecord_source.train_labels()[index])
    assert passes.tolist() == [2] * USED.size


def test_without_used_index_the_bank_row_is_the_index(folder_source):
    index, dense = _fields(epoch_order.train_order(folder_source, 3, 0), "index", "dense_index")
    np.testing.assert_array_equal(np.sort(index), np.arange(folder_source.info.num_train))
    np.testing.assert_array_equal(dense, index)


def test_order_depends_on_seed_epoch_and_pass(tfrecord_source):
    def order(seed=3, epoch=0, pass_index=0):
        return _fields(epoch_order.train_order(tfrecord_source, seed, epoch,
                                               pass_index=pass_index), "index")[0]

    base = order()
    np.testing.assert_array_equal(base, order())
    for other in (order(seed=4), order(epoch=1), order(pass_index=1)):
        assert sorted(other.tolist()) == sorted(base.tolist())
        assert not np.array_equal(other, base)


def test_epoch_records_are_passes_cut_to_whole_batches(folder_source):
    # 27 examples, G = 6: 24 records (4 batches) of each pass; 10 batches span 3 passes.
    def records(begin, end):
        return epoch_order.epoch_records(folder_source, 3, 0, begin, end, 6, 24)

    index, passes = _fields(records(0, 10), "index", "pass")
    one_pass = [_fields(epoch_order.train_order(folder_source, 3, 0, pass_index=p), "index")[0]
                for p in range(3)]
    np.testing.assert_array_equal(index, np.concatenate(
        [one_pass[0][:24], one_pass[1][:24], one_pass[2][:12]]))
    assert passes.tolist() == [0] * 24 + [1] * 24 + [2] * 12
    np.testing.assert_array_equal(_fields(records(5, 10), "index")[0], index[30:])
    assert _fields(records(10, 10), "index")[0].size == 0


def test_cached_passes_permute_all_used_records_each_pass(source):
    small = np.array([1, 5, 8, 20])

    def records(begin, end):
        return epoch_order.epoch_records(source, 3, 0, begin, end, 6, small.size, small,
                                         cache_passes=True)

    dense, passes = _fields(records(0, 5), "dense_index", "pass")
    assert dense.size == 30
    for p in range(7):  # 30 records = 7 whole passes of 4 and 2 more
        np.testing.assert_array_equal(np.sort(dense[4 * p:4 * p + 4]), np.arange(4))
    np.testing.assert_array_equal(passes, np.arange(30) // 4)
    assert len({tuple(dense[4 * p:4 * p + 4]) for p in range(7)}) > 1
    np.testing.assert_array_equal(_fields(records(3, 5), "dense_index")[0], dense[18:])


def test_augment_seed_is_per_seed_and_epoch():
    seeds = {(s, e): tuple(epoch_order.augment_seed(s, e).numpy()) for s in (0, 1) for e in (0, 1)}
    assert len(set(seeds.values())) == 4
    assert tuple(epoch_order.augment_seed(1, 1).numpy()) == seeds[(1, 1)]
    assert epoch_order.augment_seed(1, 1).dtype == tf.int32


@pytest.mark.parametrize("seed, epoch, name", [(-1, 0, "seed"), (0, 1.5, "epoch"),
                                                (0, -2, "epoch")])
def test_seed_and_epoch_must_be_integers_from_zero(seed, epoch, name):
    with pytest.raises(ConfigError, match=f"{name} must be an integer >= 0"):
        epoch_order.check_seed_epoch(seed, epoch)
