"""The per-batch evaluation counts against float64 numpy versions written here, not in llp_tf."""

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.training import metrics


def _distinct_logits(rng, b, c):
    # Each row is a permutation of 0..C-1 plus one offset: its values differ
    # by at least 1, so no two tie, even in float32.
    return np.stack([rng.permutation(c) + rng.uniform(-3, 3) for _ in range(b)]).astype(
        np.float32)


def _padded(rng, b, pad):
    """(row of each example, mask): ``pad`` padding rows repeat real rows, as the
    evaluation input does, so a padding row is as likely to be a hit."""
    rows = np.concatenate([np.arange(b), rng.integers(0, b, pad)])
    return rows, np.arange(b + pad) < b


def _reference_top_k(logits, labels, mask, k):
    """float64: real rows whose label's logit has fewer than k larger ones."""
    logits = logits.astype(np.float64)
    label_logit = logits[np.arange(len(labels)), labels]
    larger = np.sum(logits > label_logit[:, None], axis=1)
    return float(np.sum(np.where(mask, larger < k, False)))


def _reference_nearest(queries, bank, bank_true, labels, mask):
    """float64: real rows whose nearest bank row (largest dot product) has their class."""
    similarity = queries.astype(np.float64) @ bank.astype(np.float64).T
    ordered = np.sort(similarity, axis=1)
    # float32 in the code under test must find the same nearest row.
    assert np.all(ordered[:, -1] - ordered[:, -2] > 1e-3)
    nearest = np.argmax(similarity, axis=1)
    return float(np.sum(np.where(mask, bank_true[nearest] == labels, False)))


@pytest.mark.parametrize("c", [1, 3, 4, 10])
def test_top1_and_top5_counts(c):
    rng = np.random.default_rng(c)
    rows, mask = _padded(rng, 40, 9)
    logits = _distinct_logits(rng, 40, c)
    labels = rng.integers(0, c, 40)
    labels[:8] = np.argmax(logits[:8], axis=1)  # some certain top-1 hits
    logits, labels = logits[rows], labels[rows]
    for k in (1, 5):
        want = _reference_top_k(logits, labels, mask, k)
        got = metrics.top_k_count(logits, labels, mask, k)
        assert got.dtype == tf.float32 and got.shape == ()
        assert float(got) == want, (k, float(got), want)
        # A float mask (0/1) counts the same as a bool one.
        assert float(metrics.top_k_count(logits, labels, mask.astype(np.float32), k)) == want
    if c < 5:  # top-5 of fewer than five classes holds every class
        assert float(metrics.top_k_count(logits, labels, mask, 5)) == 40.0
    else:
        assert 0 < _reference_top_k(logits, labels, mask, 1) < _reference_top_k(
            logits, labels, mask, 5) < 40


def test_padding_rows_do_not_count():
    logits = np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 0, 1]]  # row i predicts class i % 4
    labels = np.array([0, 2, 2, 3, 0, 1])
    mask = np.array([True, True, True, False, False, False])  # the last three: padding hits
    assert float(metrics.top_k_count(logits, labels, mask, 1)) == 2.0
    assert float(metrics.top_k_count(logits, labels, np.zeros(6, bool), 5)) == 0.0


def test_counts_inside_tf_function_with_an_unknown_batch():
    rng = np.random.default_rng(11)
    rows, mask = _padded(rng, 30, 5)
    logits = _distinct_logits(rng, 30, 7)[rows]
    labels = rng.integers(0, 7, 30)[rows]
    count = tf.function(lambda l, y, m: metrics.top_k_count(l, y, m, 5), input_signature=[
        tf.TensorSpec([None, 7], tf.float32), tf.TensorSpec([None], tf.int64),
        tf.TensorSpec([None], tf.bool)])
    assert float(count(logits, labels, mask)) == _reference_top_k(logits, labels, mask, 5)


def _unit(rows):
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_nearest_neighbour_count():
    rng = np.random.default_rng(1)
    bank = _unit(rng.normal(size=(60, 8)))
    bank_true = rng.integers(-1, 4, 60)  # -1: true class unknown, matches no label
    bank_true[:3] = -1
    # Each query sits next to one bank row, so its nearest row is clear.
    near = np.concatenate([[0, 1, 2], rng.integers(0, 60, 22)])
    rows, mask = _padded(rng, 25, 6)
    queries = _unit(bank[near] + 0.05 * rng.normal(size=(25, 8)))[rows]
    labels = np.where(rng.uniform(size=25) < 0.6, bank_true[near], rng.integers(0, 4, 25))
    labels[:3] = [0, 1, 2]  # next to an unknown row: never a hit
    labels = labels[rows]
    want = _reference_nearest(queries, bank, bank_true, labels, mask)
    nearest = np.argmax(queries @ bank.T, axis=1)
    got = metrics.nearest_neighbour_count(nearest, tf.constant(bank_true, tf.int64), labels, mask)
    assert got.dtype == tf.float32 and got.shape == ()
    assert float(got) == want
    assert 0 < want < 25


def test_cross_entropy_sum_against_float64_and_padding_rows_out_of_range():
    rng = np.random.default_rng(3)
    logits = (rng.normal(size=(6, 5)) * 30).astype(np.float32)  # exp overflows float32 at 89
    labels = rng.integers(0, 5, 6)
    mask = np.array([True, True, True, True, False, False])
    labels[4:] = -1  # what a padding row may carry
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    want = -sum(log_softmax[i, labels[i]] for i in range(4))
    got = metrics.cross_entropy_sum(tf.constant(logits),
                                    tf.constant(labels), tf.constant(mask))
    assert float(got) == pytest.approx(want, rel=1e-5)
