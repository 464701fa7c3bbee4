import io
import re

import numpy as np
import pytest

from llp_tf.after_training import run_loader
from llp_tf.after_training.features import FeatureSet
from llp_tf.after_training.probe import readout as readout_lib
from llp_tf.errors import ConfigError

NUM_CLASSES = 4


def _feature_set(features, labels):
    features = np.asarray(features, np.float32)
    return FeatureSet(features, np.asarray(labels, np.int64),
                      np.arange(len(labels), dtype=np.int64))


def _clusters(per_class, seed, spread=0.1, dim=6):
    """Linearly separable features: class c around 3 * e_c, plus a constant offset
    (like pooled ReLU features, whose mean is far from 0)."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(NUM_CLASSES), per_class)
    centres = 3.0 * np.eye(NUM_CLASSES, dim) + 1.0
    return _feature_set(centres[labels] + rng.normal(0, spread, (labels.size, dim)), labels)


def _cross_entropy64(features, labels, kernel, bias):
    """Mean softmax cross-entropy in float64 numpy."""
    logits = features.astype(np.float64) @ kernel.astype(np.float64) + bias.astype(np.float64)
    top = logits.max(axis=1, keepdims=True)
    log_z = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
    return float(np.mean(log_z - logits[np.arange(len(labels)), labels]))


def test_first_sgd_step_is_minus_lr_times_the_mean_cross_entropy_gradient():
    train = _clusters(per_class=5, seed=0)
    learning_rate = 0.5
    readout = readout_lib.LinearReadout(6, NUM_CLASSES, learning_rate, momentum=0.9)
    loss = readout.train_epoch(train.features, train.labels, np.arange(20), batch_size=20)
    # Zero weights: uniform softmax, loss log C; SGD's first step is -lr * gradient.
    features = train.features.astype(np.float64)
    residual = np.full((20, NUM_CLASSES), 1.0 / NUM_CLASSES) - np.eye(NUM_CLASSES)[train.labels]
    kernel, bias = readout.weights()
    assert loss == pytest.approx(np.log(NUM_CLASSES), rel=1e-6)
    np.testing.assert_allclose(kernel, -learning_rate * features.T @ residual / 20, rtol=1e-5)
    np.testing.assert_allclose(bias, -learning_rate * residual.mean(axis=0), atol=1e-7)


def test_readout_separates_separable_features_and_reports_their_loss():
    train, validation = _clusters(per_class=20, seed=1), _clusters(per_class=5, seed=2)
    settings = readout_lib.ProbeSettings(epochs=15, batch_size=16, patience=100)
    readout, result = readout_lib.train_readout(train, validation, NUM_CLASSES, settings,
                                                io.StringIO())
    assert result.val_top1 == 1.0 and result.val_top5 == 1.0 and result.top1 == 1.0
    assert result.top5_k == NUM_CLASSES
    assert (result.epochs, result.drops, result.stopped_on_plateau) == (15, 0, False)
    kernel, bias = readout.weights()
    assert result.loss == pytest.approx(
        _cross_entropy64(train.features, train.labels, kernel, bias), rel=1e-5)
    assert result.val_loss == pytest.approx(
        _cross_entropy64(validation.features, validation.labels, kernel, bias), rel=1e-5)
    # Training lowers the loss from log C.
    assert result.loss < 0.5 * np.log(NUM_CLASSES)
    assert [h["epoch"] for h in result.history] == list(range(1, 16))


@pytest.mark.parametrize("max_drops", [0, 2])
def test_rate_drops_after_patience_epochs_without_a_better_top1(max_drops):
    # Validation = training features: top-1 is 1.0 from epoch 1 on and can
    # never improve, so every `patience` epochs is a plateau.
    train = _clusters(per_class=10, seed=3)
    patience = 3
    settings = readout_lib.ProbeSettings(epochs=50, batch_size=8, learning_rate=0.1,
                                         patience=patience, max_drops=max_drops)
    _, result = readout_lib.train_readout(train, train, NUM_CLASSES, settings, io.StringIO())
    assert result.history[0]["val_top1"] == 1.0
    drop_epochs = [1 + patience * (k + 1) for k in range(max_drops)]
    assert result.drop_epochs == drop_epochs and result.drops == max_drops
    assert result.stopped_on_plateau and result.epochs == 1 + patience * (max_drops + 1)
    rates = [h["learning_rate"] for h in result.history]
    expected = [0.1 * 0.1 ** sum(epoch > d for d in drop_epochs)
                for epoch in range(1, result.epochs + 1)]
    np.testing.assert_allclose(rates, expected, rtol=1e-6)
    assert result.final_learning_rate == pytest.approx(0.1 * 0.1 ** max_drops, rel=1e-6)
    assert result.best_epoch == 1


def test_no_rate_drop_after_the_last_epoch():
    # top-1 is 1.0 from epoch 1 on: epoch 4 is a plateau, but the last epoch.
    train = _clusters(per_class=10, seed=3)
    settings = readout_lib.ProbeSettings(epochs=4, batch_size=8, learning_rate=0.1, patience=3)
    _, result = readout_lib.train_readout(train, train, NUM_CLASSES, settings, io.StringIO())
    assert (result.epochs, result.drops, result.drop_epochs) == (4, 0, [])
    assert not result.stopped_on_plateau
    assert result.final_learning_rate == pytest.approx(0.1)


def test_progress_is_one_bar_over_the_epochs_that_ends_where_training_stops():
    train = _clusters(per_class=10, seed=3)  # 40 rows: 5 steps of 8
    settings = readout_lib.ProbeSettings(epochs=50, batch_size=8, learning_rate=0.1,
                                         patience=3, max_drops=2)
    stream = io.StringIO()
    _, result = readout_lib.train_readout(train, train, NUM_CLASSES, settings, stream,
                                          description="probe")
    assert result.epochs == 10 and result.drops == 2
    # Not a terminal, and quicker than a log interval: only the final line.
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert re.fullmatch(r"probe epoch 10/50 \[#{20}\] 50/50 learning_rate 0\.001 loss \S+ "
                        r"val_top1 1\.000 \d+ img/s in 00:\d\d", lines[0]), lines[0]


def test_readout_is_deterministic_given_the_seed():
    train, validation = _clusters(40, seed=4, spread=2.0), _clusters(10, seed=5, spread=2.0)

    def weights(seed):
        settings = readout_lib.ProbeSettings(epochs=3, batch_size=16, seed=seed)
        readout, result = readout_lib.train_readout(train, validation, NUM_CLASSES, settings,
                                                    io.StringIO())
        return readout.weights()[0], result.history

    first, again, other = weights(0), weights(0), weights(1)
    np.testing.assert_array_equal(first[0], again[0])
    assert first[1] == again[1]
    assert not np.array_equal(first[0], other[0])


def test_standardize_trains_on_standardised_features():
    train, validation = _clusters(20, seed=6), _clusters(5, seed=7)
    settings = readout_lib.ProbeSettings(epochs=2, standardize=True)
    readout, result = readout_lib.train_readout(train, validation, NUM_CLASSES, settings,
                                                io.StringIO())
    values = train.features.astype(np.float64)
    scaled = (values - values.mean(axis=0)) / values.std(axis=0)
    kernel, bias = readout.weights()
    assert result.loss == pytest.approx(
        _cross_entropy64(scaled, train.labels, kernel, bias), rel=1e-5)


def test_bad_inputs_are_clear_errors(tiny_llp_run, tmp_path):
    with pytest.raises(ConfigError, match="not a training run directory"):
        run_loader.load_run(str(tmp_path))
    with pytest.raises(ConfigError, match="Cannot read the checkpoint"):
        run_loader.load_run(tiny_llp_run, checkpoint=str(tmp_path / "ckpt-7"))
    with pytest.raises(ConfigError, match="epochs must be a positive integer.*learning_rate"):
        readout_lib.ProbeSettings(epochs=0, learning_rate=-1.0)
    with pytest.raises(ConfigError, match="momentum must lie in"):
        readout_lib.ProbeSettings(momentum=1.0)
    train = _clusters(5, seed=8)
    with pytest.raises(ConfigError, match=r"labels must lie in \[0, 3\)"):
        readout_lib.train_readout(train, train, 3, stream=io.StringIO())


def test_divergence_is_a_clear_error():
    train = _feature_set(np.full((8, 2), 1e30), np.arange(8) % 2)
    with pytest.raises(ConfigError, match="diverged in epoch 1"):
        readout_lib.train_readout(train, train, 2,
                                  readout_lib.ProbeSettings(epochs=1, batch_size=2),
                                  io.StringIO())
