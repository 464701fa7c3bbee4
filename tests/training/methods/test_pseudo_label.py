import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.training.config import TrainConfig
from llp_tf.training.methods import StepRunner, TrainingSplit, method_class
from llp_tf.training.methods.pseudo_label import (
    PseudoLabelMethod, PseudoLabelSettings, ramp_weight)
from tests.models.helpers import skip_unless_computable
from tests.training.methods.two_streams import (
    C, assert_mixed_precision_trains, assert_runs_agree, first_batch, iterator, log_softmax,
    permute_unlabelled_labels, streams, tiny_model, weights)

G = 16  # B = 8 labelled and U = 8 unlabelled examples a step


def _method(strategy, threshold=0.0, weight_decay=1e-4, mixed_precision="float32",
            ramp=(1.0, 3.0), final_weight=3.0, jit_compile=False):
    model, optimizer = tiny_model(strategy, mixed_precision)
    return PseudoLabelMethod(strategy, model, optimizer, num_classes=C, global_batch_size=G,
                             weight_decay=weight_decay, final_weight=final_weight,
                             ramp_start_epoch=ramp[0], ramp_end_epoch=ramp[1],
                             threshold=threshold, unlabelled_ratio=1, jit_compile=jit_compile)


def _run(method, data, epoch=2, steps=3):
    method.before_epoch(epoch, method.phase(epoch))
    return StepRunner(method).run(iterator(method, data), steps, "pseudo_label")


def test_alpha_is_zero_before_t1_linear_to_alpha_f_at_t2_then_constant():
    assert [ramp_weight(t, 100, 600, 3.0) for t in (0, 99, 100, 350, 599, 600, 2000)] == [
        0.0, 0.0, 0.0, 1.5, 3.0 * 499 / 500, 3.0, 3.0]
    assert [ramp_weight(t, 2, 2, 3.0) for t in (1, 2, 3)] == [0.0, 3.0, 3.0]
    # Fractions of a 40-epoch run: T1 = 0, T2 = 16 epochs.
    assert [ramp_weight(t, 0.0, 16.0, 3.0) for t in (0, 4, 16)] == [0.0, 0.75, 3.0]
    method = _method(tf.distribute.get_strategy(), ramp=(1.0, 5.0))
    for epoch, want in ((0, 0.0), (1, 0.0), (2, 0.75), (4, 2.25), (5, 3.0), (9, 3.0)):
        method.before_epoch(epoch, method.phase(epoch))
        assert method.unlabelled_weight.numpy() == want


def test_settings_and_their_problems():
    settings = PseudoLabelSettings()
    assert (settings.final_weight, settings.threshold, settings.unlabelled_ratio) == (3.0, 0.0, 1)
    assert {field.metadata["flag"] for field in dataclasses.fields(settings)} == {
        f"pseudo_label_{field.name}" for field in dataclasses.fields(settings)}

    class Optimization:
        global_batch_size = 1

    class Config:
        optimization = Optimization

    assert settings.problems(Config) == [
        "global_batch_size must be at least 1 + pseudo_label_unlabelled_ratio (one labelled "
        "example a step)"]
    Optimization.global_batch_size = 2
    assert settings.problems(Config) == []
    bad = PseudoLabelSettings(final_weight=-1, ramp_start=0.5, ramp_end=0.2, threshold=2,
                              unlabelled_ratio=0)
    assert len(bad.problems(Config)) == 4


@pytest.mark.parametrize("threshold_at", [None, "median"])
def test_first_step_loss_is_lees_equation_in_float64(threshold_at):
    """Labelled CE / B + alpha(t) * sum(mask * CE(u, argmax u)) / U; mask all ones
    without a threshold, half of the examples at the median confidence."""
    strategy = tf.distribute.get_strategy()
    method = _method(strategy, weight_decay=1e-3)
    data = streams()
    batch = first_batch(data, method)
    images = np.concatenate([batch["labelled"]["image"], batch["unlabelled"]["image"]])
    logits = method.model(images, training=True)["logits"].numpy().astype(np.float64)
    labelled, unlabelled = np.split(logits, [8])
    confidence = np.exp(log_softmax(unlabelled)).max(axis=1)
    if threshold_at == "median":
        method.threshold = float(np.median(confidence))
    mask = confidence >= method.threshold
    assert 0 < mask.sum() < len(mask) if threshold_at else mask.all()

    metrics = _run(method, data, epoch=2, steps=1)
    labelled_ce = -log_softmax(labelled)[np.arange(8), batch["labelled"]["label"]]
    unlabelled_ce = -log_softmax(unlabelled)[np.arange(8), unlabelled.argmax(axis=1)]
    want = {"labelled": labelled_ce.sum() / 8, "unlabelled": (mask * unlabelled_ce).sum() / 8,
            "mask": mask.mean(), "unlabelled_weight": 1.5}
    for name, value in want.items():
        np.testing.assert_allclose(metrics[name][0], value, rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(metrics["loss"][0] - metrics["weight_decay"][0],
                               want["labelled"] + 1.5 * want["unlabelled"], rtol=1e-5)


def test_before_t1_the_unlabelled_term_does_not_train():
    """alpha = 0: the same weights as a step whose unlabelled term is cut off
    by a threshold no example reaches."""
    strategy = tf.distribute.get_strategy()
    data = streams()
    early, thresholded = _method(strategy), _method(strategy, threshold=1.0)
    early_metrics = _run(early, data, epoch=0)
    _run(thresholded, data, epoch=4)
    np.testing.assert_array_equal(early_metrics["unlabelled_weight"], 0.0)
    assert np.all(early_metrics["unlabelled"] > 0)
    for a, b in zip(weights(early), weights(thresholded)):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)


def test_permuting_the_unlabelled_streams_labels_changes_nothing():
    strategy = tf.distribute.get_strategy()
    data = streams()
    honest, cheated = _method(strategy), _method(strategy)
    want = _run(honest, data)
    got = _run(cheated, permute_unlabelled_labels(data))
    assert_runs_agree(want, got, honest, cheated, exact=True)


def test_two_replicas_match_one_replica(two_replica_strategy):
    data = streams()
    single, mirrored = _method(tf.distribute.get_strategy()), _method(two_replica_strategy)
    want, got = _run(single, data), _run(mirrored, data)
    np.testing.assert_array_equal(got["unlabelled_weight"], 1.5)
    assert_runs_agree(want, got, single, mirrored)


@pytest.mark.parametrize("mixed_precision", ["float16", "bfloat16"])
def test_mixed_precision_trains_with_float32_losses(mixed_precision):
    skip_unless_computable(mixed_precision)
    strategy = tf.distribute.get_strategy()
    data = streams()
    method = _method(strategy, mixed_precision=mixed_precision)
    before = weights(method)
    metrics = _run(method, data)
    plain = _run(_method(strategy), data)
    assert_mixed_precision_trains(metrics, plain, before, method)


@pytest.mark.slow
def test_an_xla_compiled_step_gives_the_same_results():
    strategy = tf.distribute.get_strategy()
    data = streams()
    want = _run(_method(strategy), data, steps=1)
    got = _run(_method(strategy, jit_compile=True), data, steps=1)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, err_msg=name)


def test_from_config_maps_the_ramp_fractions_onto_the_runs_epochs(tmp_path):
    config = TrainConfig.from_settings(
        run_dir=str(tmp_path), dataset="digits", method="pseudo_label", epochs=40,
        global_batch_size=30, weight_decay=2e-4, pseudo_label_ramp_start=0.1,
        pseudo_label_ramp_end=0.4, pseudo_label_final_weight=2.0, pseudo_label_threshold=0.9,
        pseudo_label_unlabelled_ratio=2)
    strategy = tf.distribute.get_strategy()
    model, optimizer = tiny_model(strategy)
    method = method_class("pseudo_label").from_config(config, strategy, model, optimizer, C,
                                                      None)
    assert isinstance(method, PseudoLabelMethod)
    assert (method.ramp_start_epoch, method.ramp_end_epoch, method.final_weight) == (
        4.0, 16.0, 2.0)
    assert (method.threshold, method.weight_decay) == (0.9, 2e-4)
    assert (method.labelled_batch_size, method.unlabelled_batch_size) == (10, 20)
    split = TrainingSplit(np.array([1, 5]), np.arange(12), np.array([0, 1]))
    streams_read = method.input_spec(split).streams
    assert list(streams_read) == ["labelled", "unlabelled"]
    labelled, unlabelled = streams_read["labelled"], streams_read["unlabelled"]
    assert labelled.repeats and not unlabelled.repeats
    assert (labelled.batch_size, unlabelled.batch_size) == (10, 20)
    np.testing.assert_array_equal(labelled.index, [1, 5])
    np.testing.assert_array_equal(unlabelled.index, np.arange(12))
    assert dict(labelled.views) == dict(unlabelled.views) == {"image": "weak"}
