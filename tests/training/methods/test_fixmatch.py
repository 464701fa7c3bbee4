import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.training.config import TrainConfig
from llp_tf.training.methods import StepRunner, TrainingSplit, method_class
from llp_tf.training.methods.fixmatch import FixMatchMethod, FixMatchSettings
from tests import numerics
from tests.models.helpers import skip_unless_computable
from tests.same_state import FreshMethods, Path, StateCopier, logit_scale, model_weights
from tests.training.methods.two_streams import (
    C, SIZE, assert_mixed_precision_trains, first_batch, global_batch,
    iterator, log_softmax, permute_unlabelled_labels, streams, tiny_model, weights)

G, MU = 32, 7
B, U = 4, 28  # labelled and unlabelled examples a step
VIEWS = ("weak", "strong")


def _method(strategy, threshold=0.95, weight_decay=1e-4, mixed_precision="float32",
            unlabelled_weight=1.0, jit_compile=False):
    model, optimizer = tiny_model(strategy, mixed_precision)
    average, _ = tiny_model(strategy, mixed_precision)
    return FixMatchMethod(strategy, model, optimizer, average, num_classes=C,
                          global_batch_size=G, weight_decay=weight_decay,
                          settings=FixMatchSettings(threshold=threshold, unlabelled_ratio=MU,
                                                    unlabelled_weight=unlabelled_weight),
                          total_steps=100, jit_compile=jit_compile)


def _run(method, data, steps=3, runner=None):
    return (runner or StepRunner(method)).run(iterator(method, data), steps, "fixmatch").values


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """``fresh(strategy, **settings)``: `_method`'s method in its initial state with its
    runner, built and traced once per module (`tests.same_state.FreshMethods`)."""
    return FreshMethods(tmp_path_factory.mktemp("initial")).per_setup(_method)


def test_batch_sizes_phase_and_settings(fresh):
    method, _ = fresh(tf.distribute.get_strategy(), threshold=0.3)
    assert (method.labelled_batch_size, method.unlabelled_batch_size) == (4, 28)
    assert method.phase(0) == method.phase(9) == "fixmatch"
    assert method.bank is None and set(method.checkpoint_items()) == {"average", "updates"}
    assert method.checkpoint_items()[FixMatchMethod.exported_item] is method.average
    assert method.evaluated_models() == {"": method.average, "trained": method.model}
    settings = FixMatchSettings()
    # fixmatch.py's --confidence, --uratio, --wu; imagenet/fixmatch.py's confidence, uratio, wu.
    assert settings.resolved("fixmatch_cifar") == dict(threshold=0.95, unlabelled_ratio=7,
                                                       unlabelled_weight=1.0)
    assert settings.resolved("imagenet") == dict(threshold=0.7, unlabelled_ratio=5,
                                                 unlabelled_weight=10.0)
    flags = {field.metadata["flag"] for field in dataclasses.fields(settings)}
    assert flags == {"fixmatch_threshold", "fixmatch_mu", "fixmatch_lambda_u"}

    context = TrainConfig.from_settings(method="fixmatch", run_dir="r").method_context()
    small = dataclasses.replace(context, global_batch_size=7)
    assert settings.problems(small) == [
        "{global_batch_size} must be at least 1 + mu = 8 ({fixmatch_mu}; one labelled "
        "example a step)"]
    assert settings.problems(dataclasses.replace(context, global_batch_size=8)) == []
    bad = FixMatchSettings(threshold=1.5, unlabelled_ratio=0, unlabelled_weight=-1.0)
    assert len(bad.problems(context)) == 3


def test_first_step_loss_is_the_papers_equation_in_float64():
    """Labelled CE / B + lambda_u * sum(mask * CE(strong, argmax weak)) / (mu B), with tau
    the median confidence of the weak views, so that half of them count."""
    strategy = tf.distribute.get_strategy()
    method = _method(strategy, weight_decay=1e-3, unlabelled_weight=2.0)
    data = streams(VIEWS)
    batch = first_batch(data, method)
    images = np.concatenate([batch["labelled"]["image"], batch["unlabelled"]["weak"],
                             batch["unlabelled"]["strong"]])
    logits = method.model(images, training=True)["logits"].numpy().astype(np.float64)
    labelled, weak, strong = np.split(logits, [4, 32])
    weak_probabilities = np.exp(log_softmax(weak))
    confidence = weak_probabilities.max(axis=1)
    method.threshold = float(np.median(confidence))
    mask = confidence >= method.threshold
    assert 0 < mask.sum() < len(mask)

    metrics = _run(method, data, steps=1)
    labelled_ce = -log_softmax(labelled)[np.arange(4), batch["labelled"]["label"]]
    pseudo = weak_probabilities.argmax(axis=1)
    strong_ce = -log_softmax(strong)[np.arange(28), pseudo]
    want = {"labelled": labelled_ce.sum() / 4, "unlabelled": (mask * strong_ce).sum() / 28,
            "mask": mask.mean()}
    for name, value in want.items():
        np.testing.assert_allclose(metrics[name][0], value, rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(
        metrics["loss"][0] - metrics["weight_decay"][0],
        want["labelled"] + 2.0 * want["unlabelled"], rtol=1e-5)
    assert metrics["weight_decay"][0] > 0


def test_a_threshold_above_every_confidence_leaves_the_supervised_step(fresh):
    """tau = 1: no weak view is that sure, so only the labelled term trains; from the same
    state on the same data, tau = 0.3 keeps some (the module's shared method)."""
    strategy = tf.distribute.get_strategy()
    data = streams(VIEWS)
    metrics = _run(_method(strategy, threshold=1.0), data, steps=2)
    np.testing.assert_array_equal(metrics["mask"], 0.0)
    np.testing.assert_array_equal(metrics["unlabelled"], 0.0)
    method, runner = fresh(strategy, threshold=0.3)
    open_metrics = _run(method, data, steps=2, runner=runner)
    assert np.all(open_metrics["mask"] > 0) and np.all(open_metrics["unlabelled"] > 0)


def test_permuting_the_unlabelled_streams_labels_changes_nothing(fresh):
    """The same method from the same initial state on the data and on the data with
    its unlabelled stream's labels permuted: bit-identical metrics and weights."""
    strategy = tf.distribute.get_strategy()
    data = streams(VIEWS)
    honest, runner = fresh(strategy, threshold=0.3)
    want = _run(honest, data, runner=runner)
    want_weights = weights(honest)
    assert np.all(want["mask"] > 0)
    cheated, runner = fresh(strategy, threshold=0.3)
    got = _run(cheated, permute_unlabelled_labels(data), runner=runner)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    for a, b in zip(want_weights, weights(cheated), strict=True):
        np.testing.assert_array_equal(b, a)


def _assert_same_step(paths, copier, data, step):
    """One step of both `Path`s from the first's state, compared per term
    (`tests.numerics`): each cross-entropy a softmax of C logits (of the size a
    forward pass of the step's images gives), over the labelled examples and
    the masked unlabelled ones (pseudo labels and the mask, discrete choices,
    the same); the weight decay a sum of squares of the same weights; the
    weight moves. Returns the first path's metrics."""
    want_method, got_method = (path.method for path in paths)
    copier.copy(want_method, got_method)
    start = model_weights(want_method.model)
    batch = global_batch(data, want_method, step)
    images = np.concatenate([batch["labelled"]["image"], batch["unlabelled"]["weak"],
                             batch["unlabelled"]["strong"]])
    sums = numerics.tiny_resnet_sums(len(images), SIZE)
    softmax = numerics.softmax_term_bound(numerics.network_rtol(sums),
                                          logit_scale(want_method.model, images), C)
    want, got = (path.step("fixmatch") for path in paths)
    decayed = sum(int(np.prod(w.shape)) for w in want_method.model.weight_decay_variables())
    bounds = {"labelled": numerics.metric_bound(want["labelled"], B, softmax),
              "unlabelled": numerics.metric_bound(want["unlabelled"], U, softmax),
              "mask": numerics.metric_bound(want["mask"], U),
              "weight_decay": numerics.metric_bound(want["weight_decay"], decayed)}
    bounds["loss"] = (bounds["labelled"] + want_method.unlabelled_weight * bounds["unlabelled"]
                      + bounds["weight_decay"] + numerics.reordered_sum_bound(3, want["loss"]))
    numerics.assert_same_metrics(want, got, bounds)
    numerics.assert_same_step_moves(start, model_weights(want_method.model),
                                    model_weights(got_method.model), numerics.step_rtol(sums))
    return want


def test_two_replicas_take_the_step_of_one_from_the_same_state(two_replica_strategy, tmp_path,
                                                              fresh):
    """Three steps, each from the one replica's state copied into the two replicas'."""
    data = streams(VIEWS)
    paths = [Path(method, iterator(method, data), runner=runner)
             for method, runner in (fresh(tf.distribute.get_strategy(), threshold=0.3),
                                    fresh(two_replica_strategy, threshold=0.3))]
    copier = StateCopier(tmp_path)
    masks = [_assert_same_step(paths, copier, data, step)["mask"] for step in range(3)]
    assert max(masks) > 0  # the unlabelled term counted


# make test keeps float16 (loss scaling too), also for pseudo-label's and Mean Teacher's steps
# (theirs are slow); bfloat16 runs the same float32 losses.
@pytest.mark.parametrize("mixed_precision",
                         ["float16", pytest.param("bfloat16", marks=pytest.mark.slow)])
def test_mixed_precision_trains_with_float32_losses(mixed_precision, fresh):
    skip_unless_computable(mixed_precision)
    strategy = tf.distribute.get_strategy()
    data = streams(VIEWS)
    method = _method(strategy, threshold=0.3, mixed_precision=mixed_precision)
    before = weights(method)
    metrics = _run(method, data)
    plain_method, plain_runner = fresh(strategy, threshold=0.3)
    plain = _run(plain_method, data, runner=plain_runner)
    assert_mixed_precision_trains(metrics, plain, before, method)
    # The average (Mean Teacher's teacher is this average) stays float32.
    assert all(v.dtype == "float32" for v in method.average.weights)


@pytest.mark.slow
def test_an_xla_compiled_step_gives_the_same_results(tmp_path):
    """Two steps, each from the plain path's state, per term."""
    strategy = tf.distribute.get_strategy()
    data = streams(VIEWS)
    methods = (_method(strategy, threshold=0.3), _method(strategy, threshold=0.3,
                                                         jit_compile=True))
    paths = [Path(method, iterator(method, data)) for method in methods]
    copier = StateCopier(tmp_path)
    for step in range(2):
        _assert_same_step(paths, copier, data, step)


@pytest.mark.parametrize("family, batches, lambda_u", [("fixmatch_cifar", (16, 112), 0.5),
                                                      ("imagenet", (21, 107), 10.0)])
def test_from_config_and_the_streams_it_reads(tmp_path, family, batches, lambda_u, fresh):
    """fixmatch_cifar: mu 7 of 128 (fixmatch.py); imagenet: mu 5, lambda_u 10 and the learning
    rate 0.1 x labelled batch / 256 of imagenet/fixmatch.py."""
    settings = dict(fixmatch_lambda_u=0.5) if family == "fixmatch_cifar" else {}
    config = TrainConfig.from_settings(
        run_dir=str(tmp_path), dataset="digits", method="fixmatch", global_batch_size=128,
        fixmatch_threshold=0.8, baseline_preset=family, embedding_dim=16, width=0.125,
        architecture="resnet10", small_inputs=True, image_size=8, **settings)
    strategy = tf.distribute.get_strategy()
    trained, _ = fresh(strategy, threshold=0.3)  # its model and optimizer (only read here)
    model, optimizer = trained.model, trained.optimizer
    split = TrainingSplit(np.array([1, 5]), np.arange(12), np.array([0, 1]))
    method = method_class("fixmatch").from_context(config.method_context(), strategy, model,
                                                   optimizer, C, split)
    assert isinstance(method, FixMatchMethod)
    assert (method.threshold, method.unlabelled_weight) == (0.8, lambda_u)
    assert (method.labelled_batch_size, method.unlabelled_batch_size) == batches
    spec = FixMatchMethod.optimizer_spec(config.method_context())
    want_rate = 0.03 if family == "fixmatch_cifar" else 0.1 * batches[0] / 256
    assert (spec.learning_rate, spec.momentum, spec.nesterov, spec.step_drops) == (
        pytest.approx(want_rate, rel=1e-12), 0.9, True, False)
    labelled_batch, unlabelled_batch = batches
    streams_read = method.input_spec(split).streams
    labelled, unlabelled = streams_read["labelled"], streams_read["unlabelled"]
    assert labelled.repeats and not unlabelled.repeats
    assert (labelled.batch_size, unlabelled.batch_size) == (labelled_batch, unlabelled_batch)
    np.testing.assert_array_equal(labelled.index, [1, 5])
    np.testing.assert_array_equal(unlabelled.index, np.arange(12))
    assert dict(labelled.views) == {"image": "weak"}
    assert dict(unlabelled.views) == {"weak": "weak", "strong": "strong"}
