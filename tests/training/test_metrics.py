"""The run metrics against float64 numpy versions written here."""

import math

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.core import label_encoding
from llp_tf.training import metrics


def _distinct_logits(rng, b, c):
    # A random permutation of distinct values per row: no ties by construction.
    return np.stack([rng.permutation(c) + rng.uniform(0, 0.5) for _ in range(b)]).astype(
        np.float32)


@pytest.mark.parametrize("c", [3, 10])
def test_top1_and_top5_hits(c):
    rng = np.random.default_rng(0)
    logits = _distinct_logits(rng, 40, c)
    labels = rng.integers(0, c, 40)
    ranks = (logits > logits[np.arange(40), labels][:, None]).sum(1)  # 0 = the largest
    np.testing.assert_array_equal(metrics.top_k_hits(logits, labels, 1).numpy(), ranks == 0)
    np.testing.assert_array_equal(metrics.top_k_hits(logits, labels, 5).numpy(),
                                  ranks < min(5, c))
    if c < 5:  # every label is among the top 5 of 3 classes
        assert metrics.top_k_hits(logits, labels, 5).numpy().all()


def test_masked_sums_leave_out_padding_rows():
    logits = np.eye(4, dtype=np.float32)  # row i predicts class i
    labels = np.array([0, 2, 2, 3])
    mask = np.array([1.0, 1.0, 0.0, 0.0], np.float32)  # the last two are padding
    hits = metrics.top_k_hits(logits, labels, 1).numpy()
    np.testing.assert_array_equal(hits, [1, 0, 1, 1])
    assert float(np.sum(mask * hits)) == 1.0


def test_nearest_neighbour_hits():
    rng = np.random.default_rng(1)
    bank = rng.normal(size=(50, 8))
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    true = rng.integers(-1, 4, 50)  # -1: unknown class
    queries = rng.normal(size=(12, 8))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    labels = rng.integers(0, 4, 12)
    nearest = np.argmax(queries @ bank.T, axis=1)
    labels[:4] = true[nearest[:4]]  # make some hits certain
    want = (true[nearest] == labels).astype(np.float32)
    got = metrics.nearest_neighbour_hits(tf.constant(queries, tf.float32),
                                         tf.constant(bank, tf.float32), tf.constant(true),
                                         labels).numpy()
    np.testing.assert_array_equal(got, want)
    assert got[:4].all() and 0 < got.sum() < 12


def test_pseudo_label_stats():
    c = 3
    # rows: 0-1 labelled; 2-6 unlabelled (6 has an unknown true class)
    labels = np.array([0, 1, 0, 2, c + 4, 1, 2])
    confidence = np.array([1, 1, 0.9, 0.6, 0.0, 0.3, 0.8])
    is_labeled = np.array([1, 1, 0, 0, 0, 0, 0], bool)
    true = np.array([0, 1, 0, 1, 2, 1, -1])
    stats = metrics.pseudo_label_stats(labels, confidence, is_labeled, true, c)
    unlabeled = np.array([2, 3, 4, 5])
    assert stats.unlabeled == 4
    assert stats.accuracy == pytest.approx(np.mean(labels[unlabeled] == true[unlabeled]))
    assert stats.accuracy == pytest.approx(0.5)
    assert stats.coverage == pytest.approx(0.75)  # row 4 still holds an instance id
    assert stats.confidence == pytest.approx(np.mean([0.9, 0.6, 0.3]))
    # Warm-up: nothing propagated yet.
    instance_ids = c + np.arange(7)
    warm = metrics.pseudo_label_stats(instance_ids, confidence, is_labeled, true, c)
    assert (warm.coverage, warm.accuracy, warm.confidence) == (0.0, 0.0, 0.0)
    # Everything labelled: nothing to measure.
    none = metrics.pseudo_label_stats(labels, confidence, np.ones(7, bool), true, c)
    assert none.unlabeled == 0 and math.isnan(none.accuracy) and math.isnan(none.confidence)


def test_aggregation_scores():
    rng = np.random.default_rng(2)
    rows = rng.normal(size=(30, 5))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    classes = rng.integers(0, 3, 30)
    classes[:3] = [-1, 7, 9]  # unknown and instance ids: left out (C = 4)
    scores = metrics.aggregation_scores(rows, classes, 4)
    for c in range(3):
        want = np.linalg.norm(rows[classes == c].mean(axis=0))
        assert scores.per_class[c] == pytest.approx(want, rel=1e-12)
    assert math.isnan(scores.per_class[3]) and scores.counts[3] == 0
    assert scores.mean == pytest.approx(np.mean([np.linalg.norm(rows[classes == c].mean(0))
                                                 for c in range(3)]))
    # Identical rows score 1.
    assert metrics.aggregation_scores(np.tile(rows[:1], (4, 1)), [1] * 4, 2).mean == \
        pytest.approx(1.0)


def test_label_encoding_numpy_twins():
    labels = np.array([0, 3, 4, 9, 2, -1])
    np.testing.assert_array_equal(label_encoding.is_class_np(labels, 4),
                                  label_encoding.is_class(labels, 4).numpy())
    np.testing.assert_array_equal(label_encoding.classes_or(labels, 4), [0, 3, -1, -1, 2, -1])
