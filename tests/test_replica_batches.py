"""tests/replica_batches.py: each replica's batches r, r + R, ... as the default input deals
them, and the strategy's default input unchanged after it."""

import tensorflow as tf

from tests.replica_batches import replica_iterator


def _gathered(strategy, iterator):
    @tf.function
    def step(it):
        return strategy.gather(strategy.run(lambda batch: batch + 0, args=(next(it),)), axis=0)

    return [step(iterator).numpy().tolist() for _ in range(2)]


def test_replicas_read_the_batches_the_default_input_deals_and_leave_it_so(
        two_replica_strategy):
    strategy = two_replica_strategy
    batches = tf.data.Dataset.range(100).batch(2, drop_remainder=True)
    dealt = [[0, 1, 2, 3], [4, 5, 6, 7]]  # replica 0's batch, then replica 1's
    assert _gathered(strategy, replica_iterator(strategy, batches)) == dealt
    # A default input afterwards still deals consecutive batches, not a copy to each replica.
    default = iter(strategy.distribute_datasets_from_function(lambda _: batches))
    assert _gathered(strategy, default) == dealt
    assert _gathered(strategy, replica_iterator(strategy, batches.skip(2))) == [
        [4, 5, 6, 7], [8, 9, 10, 11]]
