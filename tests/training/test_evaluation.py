"""The Evaluator logs the metrics of `llp_tf.training.metrics` over a padded split."""

import math

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.core import bank_statistics
from llp_tf.core.memory_bank import MemoryBank
from llp_tf.training.evaluation import Evaluator

C, D, N = 6, 4, 40


def _unit(rows):
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _bank(rng):
    labels = rng.integers(0, C, N)
    labels[::5] = C + np.arange(N)[::5]  # instance ids: not yet propagated
    bank = MemoryBank(N, D, C, np.arange(8), labels[:8] % C)
    bank.embeddings.assign(_unit(rng.normal(size=(N, D))))
    bank.labels.assign(labels.astype(np.int64))
    bank.confidence.assign(rng.uniform(0.1, 1.0, N).astype(np.float32))
    return bank


def _model(images, training):
    """A fixed "network": the image is [logits (C), embedding (D)]."""
    del training
    return {"logits": images[:, :C], "embedding": tf.math.l2_normalize(images[:, C:], axis=1)}


def test_evaluate_counts_real_examples_only():
    rng = np.random.default_rng(0)
    bank = _bank(rng)
    bank_true = rng.integers(0, C, N)
    real, pad, batch = 21, 3, 8  # 3 global batches, the last one padded
    logits = np.stack([rng.permutation(C) for _ in range(real)]).astype(np.float32)
    near = rng.integers(0, N, real)
    embedding = bank.embeddings.numpy()[near] + 0.01 * rng.normal(size=(real, D))
    labels = np.where(rng.uniform(size=real) < 0.5, bank_true[near], rng.integers(0, C, real))
    labels[:4] = np.argmax(logits[:4], axis=1)
    bank_true[near[0]] = labels[0]  # row 0 is a hit of all three metrics...
    rows = np.concatenate([np.arange(real), np.zeros(pad, int)])  # ...and padding repeats it
    dataset = tf.data.Dataset.from_tensor_slices({
        "image": np.concatenate([logits, embedding], axis=1)[rows].astype(np.float32),
        "label": labels[rows], "mask": np.arange(real + pad) < real}).batch(batch)
    strategy = tf.distribute.get_strategy()
    evaluator = Evaluator(strategy, _model, bank, bank_true, C)
    got = evaluator.evaluate(strategy.distribute_datasets_from_function(lambda _: dataset), 3)

    rank = np.sum(logits > logits[np.arange(real), labels][:, None], axis=1)
    nearest = np.argmax(embedding @ bank.embeddings.numpy().astype(np.float64).T, axis=1)
    assert got["val_examples"] == real and isinstance(got["val_examples"], int)
    assert got["val_top1"] == pytest.approx(np.mean(rank == 0), abs=1e-7)
    assert got["val_top5"] == pytest.approx(np.mean(rank < 5), abs=1e-7)
    assert got["val_nn_top1"] == pytest.approx(np.mean(bank_true[nearest] == labels), abs=1e-7)
    wide = logits.astype(np.float64)
    cross_entropy = np.log(np.exp(wide).sum(axis=1)) - wide[np.arange(real), labels]
    # float32 cross-entropies of logits below C, summed over 21 examples: a
    # relative error of a few 1e-7.
    assert got["val_categorisation"] == pytest.approx(np.mean(cross_entropy), rel=1e-6)
    assert 0 < got["val_top1"] < got["val_top5"] < 1 and 0 < got["val_nn_top1"] < 1
    # Validation metrics carry the prefix; the bank's (training examples) do not.
    assert {name for name in got if not name.startswith("val_")} == {
        "pseudo_label_accuracy", "pseudo_label_coverage", "pseudo_label_confidence",
        "aggregation_score"}


@pytest.mark.parametrize("block_rows", [bank_statistics.SUM_CHUNK_ROWS, 7])
def test_bank_metrics_log_pseudo_labels_only_when_some_row_is_unlabelled(block_rows,
                                                                       monkeypatch):
    """Summed over the bank whole, and over blocks of 7 rows (the last one of 5)."""
    monkeypatch.setattr(bank_statistics, "SUM_CHUNK_ROWS", block_rows)
    rng = np.random.default_rng(1)
    bank = _bank(rng)
    true = bank.labels.numpy() % C
    true[-3:] = -1  # unknown true classes: left out
    evaluator = Evaluator(tf.distribute.get_strategy(), _model, bank, true, C)
    metrics = evaluator.bank_metrics()
    unlabelled = (np.arange(N) >= 8) & (true >= 0)
    labels = bank.labels.numpy()
    has_class = labels < C
    assert set(metrics) == {"pseudo_label_accuracy", "pseudo_label_coverage",
                            "pseudo_label_confidence", "aggregation_score"}
    assert metrics["pseudo_label_coverage"] == pytest.approx(np.mean(has_class[unlabelled]))
    assert metrics["pseudo_label_accuracy"] == pytest.approx(
        np.mean(labels[unlabelled] == true[unlabelled]))
    assert metrics["pseudo_label_confidence"] == pytest.approx(
        np.mean(bank.confidence.numpy()[unlabelled & has_class].astype(np.float64)))
    rows = bank.embeddings.numpy().astype(np.float64)
    assert metrics["aggregation_score"] == pytest.approx(np.mean(
        [np.linalg.norm(rows[true == c].mean(axis=0)) for c in range(C) if np.any(true == c)]))

    # Warm-up (no pseudo label yet): the pseudo-label metrics do not apply, and are absent.
    bank.labels.assign(np.where(np.arange(N) < 8, labels, C + np.arange(N)))
    assert set(evaluator.bank_metrics()) == {"aggregation_score"}
    # Every row labelled: no pseudo-label keys, the aggregation score stays.
    bank.is_labelled.assign(np.ones(N, bool))
    assert set(evaluator.bank_metrics()) == {"aggregation_score"}
    assert not math.isnan(evaluator.bank_metrics()["aggregation_score"])
