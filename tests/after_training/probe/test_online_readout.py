import io

import numpy as np
import pytest

from llp_tf.data.pipeline import input_fns
from llp_tf.data.sources.base import TRAIN, VALIDATION
from llp_tf.after_training import features
from llp_tf.after_training.probe import feature_cache, linear_probe, online_readout
from llp_tf.after_training.probe.readout import ProbeSettings
from llp_tf.data.sources.registry import load_source
from llp_tf.errors import ConfigError
from tests.data.helpers import all_labelled

BATCH, USED, LEARNING_RATE, MOMENTUM = 32, 64, 0.5, 0.9


@pytest.fixture(scope="module")
def source(stripes):
    return load_source(stripes)


def _sgd_momentum64(batches, num_classes):
    """Kernel and bias after Keras SGD(momentum) steps from zeros on the batches
    [(features [B, F], labels [B])], in float64: v <- m v - lr g, w <- w + v."""
    dim = batches[0][0].shape[1]
    weights = [np.zeros((dim, num_classes)), np.zeros(num_classes)]
    velocity = [np.zeros_like(w) for w in weights]
    for batch_features, labels in batches:
        x = batch_features.astype(np.float64)
        logits = x @ weights[0] + weights[1]
        probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        residual = (probabilities - np.eye(num_classes)[labels]) / len(labels)
        for k, gradient in enumerate((x.T @ residual, residual.sum(axis=0))):
            velocity[k] = MOMENTUM * velocity[k] - LEARNING_RATE * gradient
            weights[k] = weights[k] + velocity[k]
    return weights


def test_online_steps_are_sgd_momentum_on_the_frozen_trunks_augmented_features(run, source):
    config = run.config.data
    validation = features.extract_features(run.model, source, VALIDATION, 16, 40,
                                           io.StringIO())
    before = feature_cache.weights_fingerprint(run.model)
    settings = ProbeSettings(epochs=1, batch_size=BATCH, seed=5, learning_rate=LEARNING_RATE,
                             momentum=MOMENTUM, protocol="online", max_train_examples=USED)
    readout, result = online_readout.train_online_readout(
        run.model, source, validation, 4, 16, settings, config.augmentation,
        config.min_crop_area, io.StringIO())
    # The reference: the training pipeline's first epoch on the same subsample
    # (64 examples: two steps of 32), through the trunk in inference mode.
    used = features.subsample_index(160, USED, seed=5)
    dataset = input_fns.make_train_input_fn(source, BATCH, 16, 5, 0, used_index=used,
                                           augmentation=config.augmentation,
                                           min_crop_area=config.min_crop_area,
                                           labelled_index=all_labelled(source))(None)
    batches = [(run.model(b["image"], training=False)["features"].numpy(), b["label"].numpy())
               for b in dataset]
    assert len(batches) == 2
    kernel, bias = _sgd_momentum64(batches, 4)
    ours = readout.weights()
    np.testing.assert_allclose(ours[0], kernel, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours[1], bias, rtol=1e-5, atol=1e-6)
    assert np.abs(kernel).max() > 1e-2  # the steps moved the weights
    # The trunk is frozen: every variable, batch-norm statistics included.
    assert feature_cache.weights_fingerprint(run.model) == before
    # Augmented, not centre crops: the first batch's features are not the
    # centre-crop features of its examples.
    centre = features.extract_features(run.model, source, TRAIN, 16, 64, io.StringIO())
    first = next(iter(dataset))
    rows = used[first["index"].numpy()]
    assert not np.allclose(batches[0][0], centre.features[rows], atol=1e-3)
    assert result.epochs == 1 and len(result.history) == 1
    assert result.val_top1 == result.history[0]["val_top1"]
    assert 0.0 <= result.top1 <= 1.0 and np.isfinite(result.loss)


def test_online_protocol_settings_are_checked(run, source):
    with pytest.raises(ConfigError, match="standardize applies to the cached protocol"):
        ProbeSettings(protocol="online", standardize=True)
    with pytest.raises(ConfigError, match="protocol must be one of cached, online"):
        ProbeSettings(protocol="offline")
    with pytest.raises(ConfigError, match="max_train_examples must be a positive integer"):
        ProbeSettings(max_train_examples=0)
    validation = features.extract_features(run.model, source, VALIDATION, 16, 40,
                                           io.StringIO())
    too_big = ProbeSettings(epochs=1, batch_size=64, protocol="online", max_train_examples=40)
    with pytest.raises(ConfigError, match="larger than the 40 training examples"):
        online_readout.train_online_readout(run.model, source, validation, 4, 16, too_big,
                                            stream=io.StringIO())


def test_probe_trunk_online_caches_only_the_validation_split(run, source, tmp_path):
    settings = ProbeSettings(epochs=2, batch_size=32, protocol="online", max_train_examples=64)
    result, facts = linear_probe.probe_trunk(run.model, source, 16, settings,
                                             cache_dir=str(tmp_path), trunk="trained",
                                             augmentation="light", stream=io.StringIO())
    assert sorted(facts["cache"]) == ["validation"] and facts["num_train"] == 64
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trained-validation"]
    assert result.epochs == 2 and facts["num_validation"] == 40
