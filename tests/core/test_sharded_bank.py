"""The shard merges against the unsharded functions and float64 numpy; the sharded bank
itself under 2 and 4 replicas is tested with the LLP method (tests/training/methods)."""

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.core import losses, propagation, sharded_bank
from tests import reference

TAU = 0.07


def _split(num_rows, num_shards):
    return [slice(start, stop) for start, stop in sharded_bank.shard_bounds(num_rows,
                                                                            num_shards)]


def _sharded_loss(embeddings, bank, bank_labels, labels, num_shards, combine):
    """Loss and gradient from each shard's `losses.bank_sums`, merged by ``combine``."""
    scaled = tf.constant(embeddings / TAU)
    shares = [losses.bank_sums(scaled, bank[part], bank_labels[part], labels)
              for part in _split(len(bank), num_shards)]
    all_rows = combine([share[0] for share in shares])
    same_rows = combine([share[1] for share in shares])
    loss, gradient = losses.loss_from_sums(all_rows, same_rows, TAU)
    return loss.numpy(), gradient.numpy()


def _without_rescaling(shard_sums):
    """A broken merge: the shards' sums added as they are, each shifted by its own max."""
    row_max = tf.reduce_max(tf.stack([s.row_max for s in shard_sums]), axis=0)
    return losses.SoftmaxSums(row_max, tf.add_n([s.total for s in shard_sums]),
                              tf.add_n([s.weighted for s in shard_sums]))


def test_shard_bounds_cover_the_rows_once_in_near_equal_parts():
    assert sharded_bank.shard_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert sharded_bank.shard_bounds(8, 2) == [(0, 4), (4, 8)]
    assert sharded_bank.shard_bounds(5, 1) == [(0, 5)]


@pytest.mark.parametrize("num_shards", [1, 2, 3, 4])
@pytest.mark.parametrize("num_labels", [3, 200])
def test_combined_shard_sums_give_the_unsharded_loss_and_gradient(num_shards, num_labels):
    rng = np.random.default_rng(num_shards)
    embeddings = reference.unit_rows(rng, 12, 16)
    bank = reference.unit_rows(rng, 203, 16)
    bank_labels = rng.integers(0, num_labels, 203)
    labels = bank_labels[rng.choice(203, 12, replace=False)]
    loss, gradient = _sharded_loss(embeddings, bank, bank_labels, labels, num_shards,
                                   sharded_bank.combine_shards)
    want = losses.aggregation_loss(embeddings, bank, bank_labels, labels, TAU).numpy()
    np.testing.assert_allclose(loss, want, atol=2e-5, rtol=0)
    np.testing.assert_allclose(
        loss, reference.aggregation_loss(embeddings, bank, bank_labels, labels, TAU),
        atol=2e-5, rtol=0)
    np.testing.assert_allclose(
        gradient, reference.aggregation_loss_gradient(embeddings, bank, bank_labels, labels,
                                                      TAU), atol=2e-4, rtol=0)


def test_a_merge_without_rescaling_is_wrong():
    """The check above can fail: shards with different maxima need the rescaling."""
    rng = np.random.default_rng(0)
    embeddings = reference.unit_rows(rng, 12, 16)
    bank = reference.unit_rows(rng, 203, 16)
    bank_labels = rng.integers(0, 3, 203)
    labels = bank_labels[:12]
    want = reference.aggregation_loss(embeddings, bank, bank_labels, labels, TAU)
    loss, _ = _sharded_loss(embeddings, bank, bank_labels, labels, 2, _without_rescaling)
    assert np.max(np.abs(loss - want)) > 0.1


@pytest.mark.parametrize("num_shards", [2, 4])
@pytest.mark.parametrize("use_density", [False, True])
def test_merged_shard_candidates_give_the_unsharded_propagation(num_shards, use_density):
    """Shards of 0 to 3 labelled rows (fewer than k in each), and k above M too."""
    rng = np.random.default_rng(num_shards)
    embeddings = reference.unit_rows(rng, 10, 8)
    labelled = reference.unit_rows(rng, 7, 8)
    classes = rng.integers(0, 3, 7)
    density = rng.uniform(1.0, 50.0, 7).astype(np.float32) if use_density else None
    for k in (4, 9):
        queries = tf.constant(embeddings / TAU)
        scores, values = [], []
        for part in _split(7, num_shards):
            offsets = None if density is None else np.log(density[part])
            shard_scores, index = sharded_bank.shard_candidates(queries, labelled[part], k,
                                                                offsets)
            shard_classes = np.where(index.numpy() >= 0,
                                     classes[part][np.maximum(index.numpy(), 0)], -1)
            scores.append(shard_scores)
            values.append(shard_classes)
        merged_scores, merged_classes = sharded_bank.merge_candidates(
            tf.concat(scores, axis=1), tf.constant(np.concatenate(values, axis=1)), k)
        weights = propagation.class_vote(merged_scores, merged_classes, 3).numpy()
        want_classes, want_confidence = propagation.propagate(
            embeddings, labelled, classes, 3, k=k, temperature=TAU, density=density)
        np.testing.assert_array_equal(weights.argmax(axis=1), want_classes.numpy())
        np.testing.assert_allclose(weights.max(axis=1), want_confidence.numpy(), atol=1e-6)
        ref_classes, ref_confidence, _ = reference.propagate(
            embeddings, labelled, classes, 3, k, TAU, density)
        np.testing.assert_array_equal(weights.argmax(axis=1), ref_classes)
        np.testing.assert_allclose(weights.max(axis=1), ref_confidence, atol=1e-5)


@pytest.mark.parametrize("num_shards", [2, 4])
def test_merged_shard_candidates_give_the_local_density(num_shards):
    rng = np.random.default_rng(5)
    bank = reference.unit_rows(rng, 30, 8)
    queries = tf.constant(bank[::3] / TAU)
    t = 9
    scores = [sharded_bank.shard_candidates(queries, bank[part], t)[0]
              for part in _split(30, num_shards)]
    nearest, _ = sharded_bank.merge_candidates(tf.concat(scores, axis=1),
                                               tf.zeros([10, num_shards * t], tf.int32), t)
    log_density = tf.reduce_logsumexp(nearest, axis=1).numpy()
    want = propagation.log_local_density(bank[::3], bank, t=t, temperature=TAU).numpy()
    np.testing.assert_allclose(log_density, want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.exp(log_density),
                               reference.local_density(bank[::3], bank, t, TAU), rtol=1e-5)


def test_a_shard_without_rows_gives_no_candidates():
    scores, index = sharded_bank.shard_candidates(tf.ones([2, 4]), tf.zeros([0, 4]), 3)
    assert np.all(np.isneginf(scores.numpy())) and np.all(index.numpy() == -1)


# make test keeps two replicas (also test_bank_contract's tie across the shards); four, like
# the sharded bank's other four-replica tests, is slow.
@pytest.mark.parametrize("replicas", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_nearest_rows_of_the_shards_merged_are_the_banks(replicas, request):
    """Against float64 argmax; a row repeated in a later shard loses the tie, as unsharded."""
    strategy = request.getfixturevalue(
        "two_replica_strategy" if replicas == 2 else "four_replica_strategy")
    rng = np.random.default_rng(5)
    rows = rng.normal(size=(13, 4)).astype(np.float32)
    rows[11] = rows[2]  # in the last shard at 2 and at 4 replicas; row 2 in the first
    queries = np.concatenate([rows[[2, 11]], rng.normal(size=(6, 4))]).astype(np.float32)
    bank = sharded_bank.ShardedMemoryBank(strategy, 13, 4, 3, [0, 1], [0, 1])
    for shard in bank.shards:
        shard.embeddings.assign(rows[shard.start:shard.stop])
    share = len(queries) // replicas
    per_replica = strategy.experimental_distribute_values_from_function(
        lambda context: queries[context.replica_id_in_sync_group * share:][:share])
    nearest = strategy.run(tf.function(bank.nearest_rows), args=(per_replica,))
    got = np.concatenate([t.numpy() for t in strategy.experimental_local_results(nearest)])
    want = np.argmax(queries.astype(np.float64) @ rows.astype(np.float64).T, axis=1)
    assert want[0] == want[1] == 2
    np.testing.assert_array_equal(got, want)
