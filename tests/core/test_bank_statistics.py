"""The bank statistics against float64 numpy versions written here, not in llp_tf."""

import math

import numpy as np
import pytest

from llp_tf.core import bank_statistics


def _unit(rows):
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _reference_pseudo_label_stats(labels, confidence, is_labelled, true, c):
    """(unlabelled, coverage, accuracy, confidence) in float64 by a loop over rows."""
    rows = [i for i in range(len(labels)) if not is_labelled[i] and true[i] >= 0]
    if not rows:
        return 0, math.nan, math.nan, math.nan
    pseudo = [i for i in rows if 0 <= labels[i] < c]
    if not pseudo:  # nothing propagated yet: accuracy and confidence do not apply
        return len(rows), 0.0, math.nan, math.nan
    right = [i for i in rows if labels[i] == true[i]]
    mean_confidence = sum(float(confidence[i]) for i in pseudo) / len(pseudo)
    return len(rows), len(pseudo) / len(rows), len(right) / len(rows), mean_confidence


def _bank(rng, n, c):
    """A bank state: labels are classes or instance ids (c + row), 10% labelled,
    about 10% of unknown true class."""
    true = rng.integers(0, c, n)
    labels = np.where(rng.uniform(size=n) < 0.7, rng.integers(0, c, n), c + np.arange(n))
    is_labelled = rng.uniform(size=n) < 0.1
    labels[is_labelled] = true[is_labelled]
    true[rng.uniform(size=n) < 0.1] = -1
    confidence = np.where(labels < c, rng.uniform(0.2, 1.0, n), 0.0).astype(np.float32)
    return labels.astype(np.int64), confidence, is_labelled, true.astype(np.int64)


def _assert_stats(stats, want):
    assert stats.unlabelled == want[0]
    for got, expected in zip((stats.coverage, stats.accuracy, stats.confidence), want[1:]):
        assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(
            expected, rel=1e-6, abs=0), (stats, want)


def test_pseudo_label_stats():
    rng = np.random.default_rng(3)
    labels, confidence, is_labelled, true = _bank(rng, 300, 5)
    want = _reference_pseudo_label_stats(labels, confidence, is_labelled, true, 5)
    assert 0 < want[1] < 1 and 0 < want[2] < want[1]  # instance ids and wrong labels occur
    _assert_stats(bank_statistics.pseudo_label_stats(labels, confidence, is_labelled, true, 5), want)


def test_pseudo_label_stats_edges():
    rng = np.random.default_rng(4)
    labels, confidence, is_labelled, true = _bank(rng, 50, 3)
    cases = {
        # Everything labelled, or every unlabelled row of unknown class:
        # nothing to measure, all NaN.
        "no unlabelled row": (labels, confidence, np.ones(50, bool), true),
        "only unknown classes unlabelled": (labels, confidence, is_labelled,
                                            np.where(is_labelled, true, -1)),
        # Warm-up: every unlabelled row still holds its instance id; coverage 0,
        # accuracy and confidence NaN (not applicable).
        "no pseudo label": (np.where(is_labelled, labels, 3 + np.arange(50)), confidence,
                            is_labelled, true),
    }
    for name, case in cases.items():
        want = _reference_pseudo_label_stats(*case, 3)
        _assert_stats(bank_statistics.pseudo_label_stats(*case, 3), want)
    warm_up = bank_statistics.pseudo_label_stats(*cases["no pseudo label"], 3)
    assert warm_up.unlabelled > 0 and warm_up.coverage == 0.0
    assert math.isnan(warm_up.accuracy) and math.isnan(warm_up.confidence)


def _reference_scores(rows, classes, c):
    """Per-class norm of the mean row, float64, NaN for a class without rows."""
    rows = rows.astype(np.float64)
    return np.array([np.linalg.norm(rows[classes == k].mean(axis=0)) if np.any(classes == k)
                     else math.nan for k in range(c)])


@pytest.mark.parametrize("chunk_rows", [bank_statistics.SUM_CHUNK_ROWS, 7])
def test_aggregation_scores(monkeypatch, chunk_rows):
    monkeypatch.setattr(bank_statistics, "SUM_CHUNK_ROWS", chunk_rows)  # 7: many partial chunks
    rng = np.random.default_rng(2)
    c = 5
    classes = rng.integers(0, c - 1, 60)  # class 4 has no row
    classes[:6] = [-1, -1, c, c + 9, c + 40, 2]  # unknown and instance ids: left out
    # Rows of class k lean towards axis k, so the scores differ between classes.
    rows = _unit(rng.normal(size=(60, 6)) + 2.0 * np.eye(6)[np.clip(classes, 0, 5)]).astype(
        np.float32)
    scores = bank_statistics.aggregation_scores(rows, classes, c)
    want = _reference_scores(rows, classes, c)
    np.testing.assert_allclose(scores.per_class, want, rtol=1e-12)
    assert scores.counts.tolist() == [int(np.sum(classes == k)) for k in range(c)]
    assert math.isnan(scores.per_class[4]) and scores.counts[4] == 0
    assert scores.mean == pytest.approx(np.nanmean(want), rel=1e-12)
    # Identical rows score 1.
    assert bank_statistics.aggregation_scores(np.tile(rows[:1], (4, 1)), [1] * 4, 2).mean == \
        pytest.approx(1.0)


def test_aggregation_score_without_any_class_is_nan():
    scores = bank_statistics.aggregation_scores(np.eye(3, dtype=np.float32), [-1, 3, 8], 3)
    assert np.isnan(scores.per_class).all() and math.isnan(scores.mean)
    with pytest.raises(ValueError, match="embeddings must be"):
        bank_statistics.aggregation_scores(np.eye(3), [0, 1], 3)


def test_scores_leave_out_unknown_classes_and_mark_empty_ones():
    embeddings = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [-1.0, 0.0]], np.float32)
    scores = bank_statistics.aggregation_scores(embeddings, [0, 0, 2, -1], num_classes=4)
    # Class 0: mean (0.5, 0.5), norm sqrt(0.5); class 2: one unit row.
    np.testing.assert_allclose(scores.per_class[[0, 2]], [math.sqrt(0.5), 1.0], atol=1e-7)
    assert np.isnan(scores.per_class[[1, 3]]).all()
    assert scores.counts.tolist() == [2, 0, 1, 0]
    assert scores.mean == pytest.approx((math.sqrt(0.5) + 1.0) / 2)
