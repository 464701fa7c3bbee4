"""`iterator_release.release`: the caller's last reference is dropped on the thread it
starts, not on the caller's; a distributed iterator a `tf.function` has read holds no other
reference, so that thread deletes it; the evaluator releases its iterator (the controller's:
test_controller.py)."""

import threading
import weakref

import numpy as np
import tensorflow as tf

from llp_tf.training import evaluation, iterator_release


class _Deleted:
    """Records, in ``log``, the thread that deletes it."""

    def __init__(self, log, name):
        self.log, self.name = log, name

    def __del__(self):
        self.log.append((self.name, threading.current_thread().name))


def test_the_last_reference_drops_on_the_started_thread():
    log = []
    spent = [_Deleted(log, "a"), _Deleted(log, "b")]
    thread = iterator_release.release(spent)
    thread.join(timeout=10)
    assert not thread.is_alive() and not thread.daemon
    assert sorted(log) == [("a", thread.name), ("b", thread.name)]
    assert thread.name != threading.current_thread().name
    assert spent == []


def test_a_read_distributed_iterator_is_deleted_by_the_release(two_replica_strategy):
    strategy = two_replica_strategy
    dataset = tf.data.Dataset.range(8).batch(2)
    iterator = iter(strategy.distribute_datasets_from_function(lambda _: dataset))

    @tf.function
    def step(it):
        return strategy.reduce("SUM", strategy.run(tf.reduce_sum, args=(next(it),)), axis=None)

    assert int(step(iterator)) == 0 + 1 + 2 + 3
    alive = weakref.ref(iterator)
    spent = [iterator]
    del iterator
    iterator_release.release(spent).join(timeout=120)
    assert alive() is None


def test_the_evaluator_releases_its_iterator(monkeypatch, two_replica_strategy):
    released = []
    monkeypatch.setattr(iterator_release, "release", lambda spent: released.append(list(spent)))
    strategy = two_replica_strategy
    evaluator = evaluation.Evaluator(
        strategy, lambda images, training: {"logits": images, "embedding": images}, None,
        np.zeros(4, np.int64), 2)
    dataset = tf.data.Dataset.from_tensor_slices({
        "image": np.eye(2, dtype=np.float32)[[0, 1, 0, 1]], "label": np.array([0, 1, 1, 1]),
        "mask": np.ones(4, bool)}).batch(2)
    # One global batch: two rows a replica.
    got = evaluator.evaluate(strategy.distribute_datasets_from_function(lambda _: dataset), 1)
    assert got["val_top1"] == 0.75
    assert len(released) == 1 and len(released[0]) == 1
    assert isinstance(released[0][0], tf.distribute.DistributedIterator)
