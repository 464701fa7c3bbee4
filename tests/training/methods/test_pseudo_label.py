import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.training.config import TrainConfig
from llp_tf.training.methods import StepRunner, TrainingSplit, method_class
from llp_tf.training.methods.pseudo_label import (
    BATCH_NORM_PASSES, PseudoLabelMethod, PseudoLabelSettings)
from tests import numerics
from tests.models.helpers import skip_unless_computable
from tests.same_state import FreshMethods
from tests.training.methods.two_streams import (
    C, assert_mixed_precision_trains, first_batch,
    iterator, log_softmax, permute_unlabelled_labels, streams, tiny_model, weights)

G = 16  # B = 8 labelled and U = 8 unlabelled examples a step
STEPS = 8  # the run's steps: the ramp below ends after 4 of them


def _method(strategy, threshold=0.0, weight_decay=1e-4, mixed_precision="float32",
            ramp_end=0.5, final_weight=3.0, batch_norm="separate", jit_compile=False):
    model, optimizer = tiny_model(strategy, mixed_precision)
    average, _ = tiny_model(strategy, mixed_precision)
    return PseudoLabelMethod(strategy, model, optimizer, average, num_classes=C,
                             global_batch_size=G, weight_decay=weight_decay,
                             settings=PseudoLabelSettings(
                                 final_weight=final_weight, ramp_end=ramp_end,
                                 threshold=threshold, unlabelled_ratio=1, batch_norm=batch_norm),
                             total_steps=STEPS, jit_compile=jit_compile)


def _run(method, data, done=2, steps=3, runner=None):
    """``steps`` steps after ``done`` steps of the run (the ramp's and schedule's t)."""
    method.updates.assign(done)
    return (runner or StepRunner(method)).run(iterator(method, data), steps, "pseudo_label").values


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """``fresh(strategy)``: `_method(strategy)` (the defaults) in its initial state with
    its runner, built and traced once per module (`tests.same_state.FreshMethods`)."""
    return FreshMethods(tmp_path_factory.mktemp("initial")).per_setup(_method)


def _twin(fresh):
    """The model of ``fresh``'s default method, restored to its initial state: the
    weights of every `_method` before its first step. Plain Keras training-mode
    calls of it normalise with their batch's moments and update its moving
    statistics inline; ``fresh`` restores it again when a test takes the method."""
    return fresh(tf.distribute.get_strategy())[0].model


def _moving_statistics(model):
    """(moving mean, moving variance) of each of ``model``'s batch norms, as numpy."""
    return [(layer.moving_mean.numpy(), layer.moving_variance.numpy())
            for layer in model.batch_norm_layers()]


def _logits(model, images):
    """float64 [b, C] logits of a training-mode call."""
    return model(images, training=True)["logits"].numpy().astype(np.float64)


def _stem_float64(kernel, images):
    """The CIFAR stem (3x3 conv, stride 1, "same", no bias) in float64:
    [B, H, W, 3] images, [3, 3, 3, F] kernel -> [B, H, W, F]."""
    padded = np.pad(np.asarray(images, np.float64), [(0, 0), (1, 1), (1, 1), (0, 0)])
    height, width = images.shape[1:3]
    return sum(np.einsum("bhwc,cf->bhwf", padded[:, i:i + height, j:j + width],
                         np.asarray(kernel, np.float64)[i, j])
               for i in range(3) for j in range(3))


def test_alpha_rises_linearly_per_step_to_alpha_f_at_its_share_of_the_run(fresh):
    """pseudo_label.py: alpha(t) = alpha_f * clip(t / (warmup_pos * S), 0, 1), t the steps
    done before the step (here S = 8, warmup_pos 0.5: 4 steps)."""
    method, runner = fresh(tf.distribute.get_strategy())
    assert method.rampup_steps == 4.0
    metrics = _run(method, streams(), done=0, steps=6, runner=runner)
    np.testing.assert_allclose(metrics["unlabelled_weight"],
                               [3.0 * min(1.0, t / 4.0) for t in range(6)], rtol=1e-7)


def test_settings_and_their_problems():
    settings = PseudoLabelSettings()
    assert (settings.final_weight, settings.threshold, settings.unlabelled_ratio,
            settings.batch_norm, settings.ramp_end) == (
        1.0, 0.95, 1, "separate", 0.4)  # google-research/fixmatch pseudo_label.py
    assert {field.metadata["flag"] for field in dataclasses.fields(settings)} == {
        f"pseudo_label_{field.name}" for field in dataclasses.fields(settings)}

    context = TrainConfig.from_settings(method="pseudo_label", run_dir="r").method_context()
    assert settings.problems(dataclasses.replace(context, global_batch_size=1)) == [
        "{global_batch_size} must be at least 1 + {pseudo_label_unlabelled_ratio} (one "
        "labelled example a step)"]
    assert settings.problems(dataclasses.replace(context, global_batch_size=2)) == []
    bad = PseudoLabelSettings(final_weight=-1, ramp_end=1.2, threshold=2, unlabelled_ratio=0)
    assert len(bad.problems(context)) == 4


def _lees_terms(labelled, labels, unlabelled, threshold):
    """float64 labelled CE / B, sum(mask * CE(u, argmax u)) / U and the mask
    rate, from float64 logits [B, C] and [U, C]."""
    mask = np.exp(log_softmax(unlabelled)).max(axis=1) >= threshold
    labelled_ce = -log_softmax(labelled)[np.arange(len(labels)), labels]
    unlabelled_ce = -log_softmax(unlabelled)[np.arange(len(mask)), unlabelled.argmax(axis=1)]
    return {"labelled": labelled_ce.mean(), "unlabelled": (mask * unlabelled_ce).mean(),
            "mask": mask.mean()}


@pytest.mark.parametrize("threshold_at", [None, "median"])
def test_first_step_loss_is_lees_equation_in_float64(threshold_at, fresh):
    """Labelled CE / B + alpha(t) * sum(mask * CE(u, argmax u)) / U; mask all ones
    without a threshold, half of the examples at the median confidence. Each
    batch's logits are those of a training-mode call on it alone (its own
    batch-norm moments), not of the joint batch."""
    strategy = tf.distribute.get_strategy()
    data = streams()
    twin = _twin(fresh)
    batch = first_batch(data, fresh(strategy)[0])
    labels = batch["labelled"]["label"]
    labelled = _logits(twin, batch["labelled"]["image"])
    unlabelled = _logits(twin, batch["unlabelled"]["image"])
    # The joint batch's moments would give other terms (checked below).
    joint = np.split(_logits(twin, np.concatenate([batch["labelled"]["image"],
                                                   batch["unlabelled"]["image"]])), [8])
    confidence = np.exp(log_softmax(unlabelled)).max(axis=1)
    if threshold_at == "median":
        # The threshold is read when the step is traced: a method of its own.
        method, runner = _method(strategy, threshold=float(np.median(confidence))), None
    else:
        method, runner = fresh(strategy)  # threshold 0, restored after the twin's calls
    mask = confidence >= method.threshold
    assert 0 < mask.sum() < len(mask) if threshold_at else mask.all()

    metrics = _run(method, data, done=2, steps=1, runner=runner)
    want = dict(_lees_terms(labelled, labels, unlabelled, method.threshold),
                unlabelled_weight=1.5)
    for name, value in want.items():
        np.testing.assert_allclose(metrics[name][0], value, rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(metrics["loss"][0] - metrics["weight_decay"][0],
                               want["labelled"] + 1.5 * want["unlabelled"], rtol=1e-5)
    joint_terms = _lees_terms(joint[0], labels, joint[1], method.threshold)
    for name in ("labelled", "unlabelled"):
        assert not np.isclose(metrics[name][0], joint_terms[name], rtol=1e-3), name


@pytest.mark.parametrize("passes", BATCH_NORM_PASSES)
def test_moving_statistics_follow_the_labelled_batch_only(passes, fresh):
    """separate (the default): after one step, every batch norm's moving mean
    and variance are m * old + (1 - m) * the moments of its input over the
    labelled batch, as Keras's own update after a training call on the labelled
    images alone; joint: over the labelled and unlabelled batches together."""
    strategy = tf.distribute.get_strategy()
    data = streams()
    batch = first_batch(data, fresh(strategy)[0])
    images = {"separate": batch["labelled"]["image"],
              "joint": np.concatenate([batch["labelled"]["image"], batch["unlabelled"]["image"]])}
    twins = {}
    for name in images:
        twin = _twin(fresh)
        twin(images[name], training=True)
        twins[name] = _moving_statistics(twin)
    method, runner = fresh(strategy, batch_norm=passes)  # (restored after the twins' calls)
    layers = method.model.batch_norm_layers()
    first, first_kernel = layers[0], method.model.trunk.stem_conv.kernel.numpy()
    momentum, old_mean, old_variance = (first.momentum, first.moving_mean.numpy(),
                                        first.moving_variance.numpy())

    _run(method, data, steps=1, runner=runner)
    # The same float32 ops on the same inputs as the twin's (only where the
    # update is applied differs): equal to float32 rounding of values ~1.
    close = dict(rtol=1e-6, atol=1e-7)
    other = "joint" if passes == "separate" else "separate"
    for layer, want, unwanted in zip(layers, twins[passes], twins[other], strict=True):
        for statistic, wanted, unwanted_value in zip(("moving_mean", "moving_variance"), want,
                                                     unwanted):
            got = getattr(layer, statistic).numpy()
            np.testing.assert_allclose(got, wanted, **close,
                                       err_msg=f"{layer.name} {statistic}")
            assert not np.allclose(got, unwanted_value, **close)
    # The first batch norm reads the stem's output: its moments in float64. The
    # float32 stem is within ~1e-6 of it (values ~1), so (1 - m) * its moments
    # are within ~3e-9: atol 1e-8 on means ~1e-4, rtol 1e-5 on variances ~1.
    stem = _stem_float64(first_kernel, images[passes])
    np.testing.assert_allclose(
        first.moving_mean, momentum * old_mean + (1 - momentum) * stem.mean(axis=(0, 1, 2)),
        rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(
        first.moving_variance,
        momentum * old_variance + (1 - momentum) * stem.var(axis=(0, 1, 2)), rtol=1e-5)


def test_at_the_first_step_the_unlabelled_term_does_not_train(fresh):
    """alpha(0) = 0: the unlabelled term counts (it is positive) but does not
    train: a first step on other unlabelled images ends with the same weights,
    bit for bit (moving statistics too: they follow the labelled pass). At t =
    2 (alpha 1.5) the other images move the weights otherwise."""
    strategy = tf.distribute.get_strategy()
    data = streams()
    other = {"labelled": data["labelled"], "unlabelled": streams(seed=1)["unlabelled"]}
    assert not np.array_equal(other["unlabelled"]["image"], data["unlabelled"]["image"])
    for done in (0, 2):
        runs = []
        for given in (data, other):
            method, runner = fresh(strategy)
            runs.append((_run(method, given, done=done, steps=1, runner=runner),
                         weights(method)))
        (metrics, want), (_, got) = runs
        if done == 0:
            np.testing.assert_array_equal(metrics["unlabelled_weight"], 0.0)
            assert np.all(metrics["unlabelled"] > 0)
            for a, b in zip(want, got, strict=True):
                np.testing.assert_array_equal(b, a)
        else:
            assert any(not np.array_equal(a, b) for a, b in zip(want, got))


def test_permuting_the_unlabelled_streams_labels_changes_nothing(fresh):
    """The same method from the same initial state on the data and on the data with
    its unlabelled stream's labels permuted: bit-identical metrics and weights."""
    strategy = tf.distribute.get_strategy()
    data = streams()
    honest, runner = fresh(strategy)
    want = _run(honest, data, runner=runner)
    want_weights = weights(honest)
    cheated, runner = fresh(strategy)
    got = _run(cheated, permute_unlabelled_labels(data), runner=runner)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    for a, b in zip(want_weights, weights(cheated), strict=True):
        np.testing.assert_array_equal(b, a)


# Slow: a method traced over two replicas (a minute on two cores). make test keeps FixMatch's
# two replicas against one (test_fixmatch.py; the same two-stream runner) and synchronised
# batch norm over two replicas (tests/models/test_distributed.py).
@pytest.mark.slow
def test_two_replicas_match_one_replica(two_replica_strategy, fresh):
    """Synchronised batch norm: both passes normalise with the moments of the
    global batch, and the moving statistics follow the labelled one, on both
    replicas. One step from the same weights, to `tests.numerics`' bounds."""
    data = streams()
    (single, single_runner), (mirrored, mirrored_runner) = (
        fresh(tf.distribute.get_strategy()), fresh(two_replica_strategy))
    before = weights(single)
    want, got = (_run(method, data, done=2, steps=1, runner=runner)
                 for method, runner in ((single, single_runner), (mirrored, mirrored_runner)))
    np.testing.assert_array_equal(got["unlabelled_weight"], 1.5)
    numerics.assert_close_metrics(want, got, 1)
    numerics.assert_same_moves(before, weights(single), weights(mirrored), 1)


# Slow: a mixed-precision method traced (20-40 s on two cores). make test keeps FixMatch's
# float16 step (methods/test_fixmatch.py: the same `SourceBaseline` step, loss scaling and
# `pseudo_label_terms`, checked by the same `assert_mixed_precision_trains`).
@pytest.mark.slow
@pytest.mark.parametrize("mixed_precision", ["float16", "bfloat16"])
def test_mixed_precision_trains_with_float32_losses(mixed_precision, fresh):
    skip_unless_computable(mixed_precision)
    strategy = tf.distribute.get_strategy()
    data = streams()
    method = _method(strategy, mixed_precision=mixed_precision)
    before = weights(method)
    metrics = _run(method, data)
    plain_method, plain_runner = fresh(strategy)
    plain = _run(plain_method, data, runner=plain_runner)
    assert_mixed_precision_trains(metrics, plain, before, method)


@pytest.mark.slow
def test_an_xla_compiled_step_gives_the_same_results():
    strategy = tf.distribute.get_strategy()
    data = streams()
    want = _run(_method(strategy), data, steps=1)
    got = _run(_method(strategy, jit_compile=True), data, steps=1)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, err_msg=name)


def test_from_config_maps_the_ramp_share_onto_the_runs_steps(tmp_path, fresh):
    config = TrainConfig.from_settings(
        run_dir=str(tmp_path), dataset="digits", method="pseudo_label", epochs=40,
        global_batch_size=30, weight_decay=2e-4,
        pseudo_label_ramp_end=0.4, pseudo_label_final_weight=2.0, pseudo_label_threshold=0.9,
        pseudo_label_unlabelled_ratio=2, pseudo_label_batch_norm="joint",
        baseline_optimizer="protocol", embedding_dim=16, width=0.125, architecture="resnet10",
        small_inputs=True, image_size=8)
    strategy = tf.distribute.get_strategy()
    trained, _ = fresh(strategy)  # its model and optimizer (the new method only reads them)
    model, optimizer = trained.model, trained.optimizer
    split = TrainingSplit(np.array([1, 5]), np.arange(60), np.array([0, 1]))
    method = method_class("pseudo_label").from_context(config.method_context(), strategy, model,
                                                       optimizer, C, split)
    assert isinstance(method, PseudoLabelMethod)
    # 40 epochs of 60 // 30 = 2 steps: the ramp ends after 0.4 x 80 = 32 steps.
    assert (method.rampup_steps, method.final_weight) == (32.0, 2.0)
    # The protocol's optimiser: its weight decay, no per-step factor.
    assert (method.threshold, method.weight_decay, method.batch_norm) == (0.9, 2e-4, "joint")
    assert method.learning_rate_factor() is None
    assert (method.labelled_batch_size, method.unlabelled_batch_size) == (10, 20)
    streams_read = method.input_spec(split).streams
    assert list(streams_read) == ["labelled", "unlabelled"]
    labelled, unlabelled = streams_read["labelled"], streams_read["unlabelled"]
    assert labelled.repeats and not unlabelled.repeats
    assert (labelled.batch_size, unlabelled.batch_size) == (10, 20)
    np.testing.assert_array_equal(labelled.index, [1, 5])
    np.testing.assert_array_equal(unlabelled.index, np.arange(60))
    assert dict(labelled.views) == dict(unlabelled.views) == {"image": "weak"}


def test_an_unknown_batch_norm_pass_is_refused(fresh):
    # The config refuses it too (tests/training/test_config.py, choices).
    strategy = tf.distribute.get_strategy()
    method, _ = fresh(strategy)  # its models: no new ones built
    with pytest.raises(ValueError, match="batch_norm must be one of"):
        PseudoLabelMethod(strategy, method.model, method.optimizer, method.average,
                          num_classes=C, global_batch_size=G, weight_decay=1e-4,
                          settings=PseudoLabelSettings(batch_norm="together"), total_steps=STEPS)
