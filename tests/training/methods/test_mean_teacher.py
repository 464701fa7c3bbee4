"""Mean Teacher: its step in both families (the loss against the equations in
float64; the teacher's EMA of the trainable weights, with the student's batch-norm
statistics (mean_teacher.py) or its own (CuriousAI's ImageNet run); the ramps and
the horizon's share of the run against the sources' formulas; replicas, precision,
XLA) and its runs (both models evaluated, resume after SIGKILL, the teacher read
back and exported)."""

import inspect
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from llp_tf.training.config import TrainConfig
from llp_tf.training.methods import StepRunner, TrainingSplit, method_class
from llp_tf.training.methods import recipes
from llp_tf.training.methods.mean_teacher import (
    UNLABELLED_VIEWS, MeanTeacherMethod, MeanTeacherSettings, consistency_cost,
    linear_rampup, sigmoid_rampup)
from tests.models.helpers import skip_unless_computable
from tests.runs import checkpoint_state
from tests.same_state import FreshMethods
from tests.training.methods.two_streams import (
    C, SIZE, first_batch, iterator, log_softmax, permute_unlabelled_labels, streams,
    tiny_model)

G = 16  # B = 8 labelled and U = 8 unlabelled images a step
VIEW_NAMES = tuple(UNLABELLED_VIEWS)


def _method(strategy, ema_decay=0.7, consistency_weight=10.0, consistency_type="mse",
            rampup=0.0, total_steps=100, mixed_precision="float32", weight_decay=1e-4,
            jit_compile=False, family="fixmatch_cifar"):
    """A method over `tiny_model` (its student and, built the same way, its
    teacher); the horizon is the share of the run that makes ``ema_decay``."""
    model, optimizer = tiny_model(strategy, mixed_precision)
    teacher, _ = tiny_model(strategy, mixed_precision)
    return MeanTeacherMethod(
        strategy, model, optimizer, teacher, num_classes=C, global_batch_size=G,
        weight_decay=weight_decay, total_steps=total_steps, jit_compile=jit_compile,
        family=family, settings=MeanTeacherSettings(
            consistency_weight=consistency_weight, consistency_type=consistency_type,
            consistency_rampup=rampup, ema_horizon=1 / (1 - ema_decay) / total_steps))


def _data(same_views=False):
    """Two streams, each unlabelled image in a student and a teacher view (the
    teacher's a noisy copy unless ``same_views``)."""
    data = streams(unlabelled_views=VIEW_NAMES)
    unlabelled = data["unlabelled"]
    noise = np.random.default_rng(3).normal(scale=0.3, size=unlabelled["student"].shape)
    unlabelled["teacher"] = (unlabelled["student"] if same_views else
                             (unlabelled["student"] + noise).astype(np.float32))
    return data


def _run(method, data, steps=1, runner=None):
    return (runner or StepRunner(method)).run(iterator(method, data), steps, "mean_teacher").values


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """``fresh(**settings)``: `_method` of those settings (the defaults' if none) on one
    replica in its initial state with its runner, built and traced once per module for each
    set of values (`tests.same_state.FreshMethods`)."""
    methods = FreshMethods(tmp_path_factory.mktemp("initial"))
    defaults = {name: parameter.default for name, parameter in
                inspect.signature(_method).parameters.items() if name != "strategy"}
    return lambda **settings: methods(
        tuple(sorted(dict(defaults, **settings).items())),
        lambda: _method(tf.distribute.get_strategy(), **settings))


def _values(variable):
    """The per-replica copies of a (Keras or TF) variable, as numpy."""
    values = getattr(getattr(variable, "_value", variable), "values", None)
    return [v.numpy() for v in values] if values else [variable.numpy()]


def _softmax(logits):
    return np.exp(log_softmax(logits))


def _twin(fresh):
    """The student of ``fresh``'s default method, restored to its initial state: the
    weights of every `_method`'s student and teacher before its first step. Plain Keras
    training-mode calls of it normalise with their batch's moments and update its moving
    statistics inline; ``fresh`` restores it again when a test takes the method."""
    return fresh()[0].model


def _twin_logits(twin, images):
    """float64 logits of a training-mode call of ``twin`` on ``images`` alone."""
    return twin(images, training=True)["logits"].numpy().astype(np.float64)


def _moving_means(model):
    """The moving mean of each of ``model``'s batch norms, as numpy."""
    return [layer.moving_mean.numpy() for layer in model.batch_norm_layers()]


# KL's cost is checked in make test by the ImageNet family's test below.
@pytest.mark.parametrize("consistency_type", ["mse", pytest.param("kl", marks=pytest.mark.slow)])
def test_the_loss_terms_are_the_equations_in_float64(consistency_type, fresh):
    """CE averaged over the labelled batch + w * consistency averaged over the
    unlabelled one (mean_teacher.py), each pass with its own batch moments."""
    data = _data()
    twin = _twin(fresh)
    batch = first_batch(data, fresh()[0])
    labelled = _twin_logits(twin, batch["labelled"]["image"])
    student = _twin_logits(twin, batch["unlabelled"]["student"])
    # The teacher starts as the student.
    teacher = _twin_logits(twin, batch["unlabelled"]["teacher"])
    # The joint batch's moments would give another consistency (checked below).
    joint = np.split(_twin_logits(twin, np.concatenate([batch["unlabelled"]["student"],
                                                        batch["unlabelled"]["teacher"]])), 2)
    method, runner = fresh(consistency_type=consistency_type)  # restored after the twin's calls
    metrics = _run(method, data, runner=runner)
    labels = batch["labelled"]["label"]
    cross_entropy = -log_softmax(labelled)[np.arange(len(labels)), labels].mean()
    p_student, p_teacher = _softmax(student), _softmax(teacher)
    if consistency_type == "mse":
        consistency = ((p_student - p_teacher) ** 2).mean(axis=1).mean()
    else:
        consistency = (p_teacher * (log_softmax(teacher) - log_softmax(student))).sum(1).mean()
    assert consistency > 1e-5  # different views: the teacher disagrees
    # float32 logits of values ~1 through a handful of ops: 1e-5 relative.
    np.testing.assert_allclose(metrics["categorisation"][0], cross_entropy, rtol=1e-5)
    np.testing.assert_allclose(metrics["consistency"][0], consistency, rtol=1e-4)
    np.testing.assert_allclose(metrics["consistency_weight"][0], 10.0, rtol=1e-7)
    np.testing.assert_allclose(metrics["loss"][0] - metrics["weight_decay"][0],
                               cross_entropy + 10.0 * consistency, rtol=1e-5)
    if consistency_type == "mse":
        joint_consistency = ((_softmax(joint[0]) - _softmax(joint[1])) ** 2).mean()
        assert not np.isclose(metrics["consistency"][0], joint_consistency, rtol=1e-3)


def test_no_gradient_reaches_the_teacher_and_the_consistency_is_zero_for_equal_outputs():
    logits = tf.constant(np.random.default_rng(0).normal(size=(5, C)), tf.float32)
    teacher = tf.Variable(logits + 1.0)  # a constant shift: the same softmax
    with tf.GradientTape(persistent=True) as tape:
        cost = tf.reduce_sum(consistency_cost(logits * 1.0, teacher * 1.0, "mse"))
    assert tape.gradient(cost, teacher) is None
    np.testing.assert_allclose(cost.numpy(), 0.0, atol=1e-12)


def test_the_teacher_averages_the_trainable_weights_and_takes_the_students_statistics(fresh):
    """After each step, every trainable teacher weight is a * its old value + (1 - a) * the
    student's new one, bit for bit (mean_teacher.py averages model_vars(), the trainable
    variables); its batch-norm statistics are the student's (the EMA getter finds no average
    of them); the student's follow its labelled pass alone, as a Keras training call."""
    data = _data()
    twin = _twin(fresh)
    twin(first_batch(data, fresh()[0])["labelled"]["image"], training=True)
    twin_means = _moving_means(twin)
    method, runner = fresh()  # restored; decay 0.7: a swap of old and new weights would show
    assert len(method.teacher.weights) > len(method.teacher.trainable_variables)
    for teacher, student in zip(method.teacher.weights, method.model.weights):
        np.testing.assert_array_equal(teacher.numpy(), student.numpy())
    batches = iterator(method, data)
    alpha = np.float32(method.ema_decay)
    assert alpha == pytest.approx(0.7, rel=1e-6)
    for t in (1, 2, 3):
        before = [v.numpy() for v in method.teacher.trainable_weights]
        runner.run(batches, 1, "mean_teacher")
        assert int(method.teacher_updates.numpy()) == t
        for teacher, old, student in zip(method.teacher.trainable_weights, before,
                                         method.model.trainable_weights):
            np.testing.assert_array_equal(
                teacher.numpy(), alpha * old + (np.float32(1) - alpha) * student.numpy(),
                err_msg=teacher.path)
        for teacher, student in zip(method.teacher.non_trainable_weights,
                                    method.model.non_trainable_weights):
            np.testing.assert_array_equal(teacher.numpy(), student.numpy(), err_msg=teacher.path)
        if t == 1:
            for layer, want in zip(method.model.batch_norm_layers(), twin_means, strict=True):
                # The same float32 ops on the same inputs (only where the update runs differs).
                np.testing.assert_allclose(layer.moving_mean.numpy(), want,
                                           rtol=1e-6, atol=1e-7, err_msg=layer.name)
    moving = method.teacher.batch_norm_layers()[0].moving_mean
    assert not np.allclose(moving.numpy(), 0.0)
    assert not np.allclose(method.teacher.trainable_variables[0].numpy(),
                           method.model.trainable_variables[0].numpy())


def _imagenet_data():
    """Two streams, every image (labelled ones too) in a student and a teacher view."""
    data = streams(unlabelled_views=VIEW_NAMES)
    rng = np.random.default_rng(4)
    for stream in data.values():
        first = stream.get("student", stream.get("image"))
        stream["student"] = first
        stream["teacher"] = (first + rng.normal(scale=0.3, size=first.shape)).astype(np.float32)
        stream.pop("image", None)
    return data


def test_imagenet_loss_is_over_all_images_and_the_teacher_keeps_its_own_statistics(fresh):
    """CuriousAI's main.py: CE summed over the labelled images and KL summed over every image,
    both / (B + U), from one student pass over all student views and one teacher pass over all
    teacher views (each with its batch's moments); the teacher's batch-norm statistics follow
    its own pass, its parameters the warm-started EMA: a_1 = min(1 - 1/2, a). The weight
    w(t) = w_max * ramp(t, r S), t the steps done before the step: the sigmoid ramp of
    CuriousAI's release here (r = 0.4 of S = 10 steps: 4 steps), the linear one of
    mean_teacher.py through the same step (test_the_weight_ramps_linearly_...)."""
    strategy = tf.distribute.get_strategy()
    method = _method(strategy, consistency_type="kl", ema_decay=0.9, family="imagenet",
                     rampup=0.4, total_steps=10)
    assert method.rampup_steps == 4.0
    data = _imagenet_data()
    batch = first_batch(data, method)
    teacher_images = np.concatenate([batch["labelled"]["teacher"],
                                     batch["unlabelled"]["teacher"]])
    twin = _twin(fresh)  # its first call: the teacher's pass, from the initial statistics
    teacher = _twin_logits(twin, teacher_images)
    twin_means = _moving_means(twin)
    student = _twin_logits(twin, np.concatenate([batch["labelled"]["student"],
                                                 batch["unlabelled"]["student"]]))
    before = [v.numpy() for v in method.teacher.trainable_weights]
    runner = StepRunner(method)
    metrics = _run(method, data, runner=runner)
    labels = batch["labelled"]["label"]
    images = len(student)
    cross_entropy = -log_softmax(student[:len(labels)])[np.arange(len(labels)), labels].sum()
    kl = (_softmax(teacher) * (log_softmax(teacher) - log_softmax(student))).sum()
    np.testing.assert_allclose(metrics["categorisation"][0], cross_entropy / images, rtol=1e-5)
    np.testing.assert_allclose(metrics["consistency"][0], kl / images, rtol=1e-4)
    for layer, want in zip(method.teacher.batch_norm_layers(), twin_means, strict=True):
        np.testing.assert_allclose(layer.moving_mean.numpy(), want,
                                   rtol=1e-6, atol=1e-7, err_msg=layer.name)
    alpha = np.float32(min(1 - 1 / 2, method.ema_decay))
    for teacher_weight, old, weight in zip(method.teacher.trainable_weights, before,
                                           method.model.trainable_weights):
        np.testing.assert_allclose(teacher_weight.numpy(),
                                   alpha * old + (np.float32(1) - alpha) * weight.numpy(),
                                   rtol=1e-6, atol=1e-7, err_msg=teacher_weight.path)
    streams_read = method.input_spec(TrainingSplit(np.arange(8), np.arange(64),
                                                   np.arange(8) % C)).streams
    assert dict(streams_read["labelled"].views) == UNLABELLED_VIEWS
    # Five steps more: t = 0 to 5 in all (float32 ramp: 1e-6, as sigmoid_rampup's own test).
    weights = np.concatenate([metrics["consistency_weight"],
                              _run(method, data, steps=5, runner=runner)["consistency_weight"]])
    np.testing.assert_allclose(
        weights, [10.0 * np.exp(-5.0 * (1.0 - min(1.0, t / 4.0)) ** 2) for t in range(6)],
        rtol=1e-6)


def test_the_weight_ramps_linearly_over_its_share_of_the_run(fresh):
    """w(t) = w_max * min(1, t / (r S)) (mean_teacher.py: clip(step / (warmup_pos *
    train_kimg)), with t the steps done before the step."""
    np.testing.assert_allclose([float(linear_rampup(t, 4.0)) for t in range(7)],
                               [0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0], rtol=1e-7)
    assert float(linear_rampup(0, 0.0)) == 1.0
    # The method of mean_teacher.py's family (on the shared method's models: none built)
    # ramps linearly over r S steps; its steps read w(t) as CuriousAI's family's (the per-step
    # check: test_imagenet_loss_is_over_all_images_...).
    shared, _ = fresh()
    method = MeanTeacherMethod(
        tf.distribute.get_strategy(), shared.model, shared.optimizer, shared.teacher,
        num_classes=C, global_batch_size=G, weight_decay=1e-4, total_steps=10,
        settings=MeanTeacherSettings(consistency_weight=10.0, consistency_type="mse",
                                     consistency_rampup=0.4))
    assert method.rampup is linear_rampup and method.rampup_steps == 4.0  # a ramp of 4 steps


def test_the_sigmoid_ramp_is_the_mt_releases_formula():
    """imagenet: w(t) = w_max exp(-5 (1 - min(1, t / T))^2) (pytorch/mean_teacher/ramps.py)."""
    want = [np.exp(-5.0 * (1.0 - min(1.0, t / 4.0)) ** 2) for t in range(7)]
    np.testing.assert_allclose([float(sigmoid_rampup(t, 4.0)) for t in range(7)], want,
                               rtol=1e-6)
    assert float(sigmoid_rampup(3, 0.0)) == 1.0


def test_the_teachers_horizon_is_its_sources_share_of_the_run():
    """The one rule: 1/(1 - a) is the share of the run it is in the source. At the source's
    own length each source's decay comes back; the demo's 1,240 steps give mean_teacher.py's
    0.1% as 1.18 steps."""
    cifar = recipes.cifar_code("mean_teacher.py").ema_horizon
    assert recipes.ema_decay(cifar, 2 ** 20) == pytest.approx(0.999, rel=1e-12)
    imagenet = recipes.mt_imagenet(128).ema_horizon
    assert recipes.ema_decay(imagenet, 60 * (1_153_167 // 200)) == pytest.approx(0.9997,
                                                                               rel=1e-12)
    assert recipes.ema_decay(cifar, 1240) == pytest.approx(1 - 1 / (1240 * 1000 / 2 ** 20),
                                                           rel=1e-12)
    assert recipes.ema_decay(cifar, 500) == 0.0  # under one step: the teacher is the student


def test_from_config_reads_two_streams_and_the_runs_steps(tmp_path, fresh):
    from tests.runs import tiny_config
    config = tiny_config(tmp_path, "digits", method="mean_teacher", embedding_dim=16,
                         width=0.125, architecture="resnet10", small_inputs=True, image_size=8,
                         global_batch_size=12, epochs=5, mean_teacher_consistency_rampup=0.3,
                         mean_teacher_unlabelled_ratio=2)
    strategy = tf.distribute.get_strategy()
    trained, _ = fresh()  # its model and optimizer (the new method only reads them)
    model, optimizer = trained.model, trained.optimizer
    split = TrainingSplit(np.array([1, 5]), np.arange(50), np.array([0, 1]))
    method = method_class("mean_teacher").from_context(config.method_context(), strategy, model,
                                                       optimizer, C, split)
    assert isinstance(method, MeanTeacherMethod)
    # 5 epochs of 50 // 12 = 4 steps: 20 steps, a ramp of 6, a horizon of 0.02 steps.
    assert method.rampup_steps == pytest.approx(6.0)
    assert method.ema_decay == 0.0
    assert method.consistency_weight == 50.0
    assert (method.labelled_batch_size, method.unlabelled_batch_size) == (4, 8)
    streams_read = method.input_spec(split).streams
    assert list(streams_read) == ["labelled", "unlabelled"]
    labelled, unlabelled = streams_read["labelled"], streams_read["unlabelled"]
    assert labelled.repeats and not unlabelled.repeats
    np.testing.assert_array_equal(labelled.index, [1, 5])
    np.testing.assert_array_equal(unlabelled.index, np.arange(50))
    assert dict(labelled.views) == {"image": "weak"}
    assert dict(unlabelled.views) == UNLABELLED_VIEWS == {"student": "weak", "teacher": "weak"}


def test_permuting_the_unlabelled_streams_labels_changes_nothing(fresh):
    """The same method from the same initial state on the data and on the data with
    its unlabelled stream's labels permuted: bit-identical metrics and teacher."""
    data = _data()
    honest, runner = fresh()
    want = _run(honest, data, steps=2, runner=runner)
    want_teacher = [v.numpy() for v in honest.teacher.weights]
    cheated, runner = fresh()
    got = _run(cheated, permute_unlabelled_labels(data), steps=2, runner=runner)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    for a, b in zip(want_teacher, cheated.teacher.weights, strict=True):
        np.testing.assert_array_equal(b.numpy(), a)


# The step's longest float32 reductions, the batch-norm moments and the first
# stage's kernel gradients, sum b x S^2 terms (b = 8 images a pass, 512 at 8 px).
# Summed in another order (per replica, then over replicas; or fused by XLA),
# such a sum moves by at most n * eps (eps = 2^-24) of the sum of its terms'
# magnitudes: 3.1e-5 at 8 px. Two ways of taking one step from the same state
# agree to that, relative, in each metric and in each update.
def _reordered_sum_rtol(size):
    return G // 2 * size * size * 2.0 ** -24


def _weights(method):
    """{(model, trainable?): replica 0's copy of each of its weights}, as numpy."""
    return {(name, trainable): [_values(v)[0] for v in getattr(method, name).weights
                                if v.trainable == trainable]
            for name in ("model", "teacher") for trainable in (True, False)}


def _assert_same_step(want_method, got_method, before, want, got, size=SIZE):
    """Two methods took the same one step from the same ``before`` weights
    (`_weights`): equal metrics ``want``, ``got`` and weight updates (after -
    before) to `_reordered_sum_rtol`, per model and per kind of weight (trainable,
    moving statistics). An update is a difference of stored float32 weights, so
    each run's update may also be off by the roundings of storing them (up to 2
    ulps of each weight: the teacher's rounds two products and a sum)."""
    rtol = _reordered_sum_rtol(size)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, err_msg=name)
    want_after, got_after = _weights(want_method), _weights(got_method)
    for group, start in before.items():
        update = np.concatenate([(a - b).ravel() for a, b in zip(want_after[group], start)])
        difference = np.concatenate([(g - w).ravel() for g, w in
                                     zip(got_after[group], want_after[group])])
        ulps = np.concatenate([np.spacing(np.abs(a)).ravel() for a in want_after[group]])
        assert np.linalg.norm(update) > 0, group
        assert np.linalg.norm(difference) <= (
            rtol * np.linalg.norm(update) + 2 * np.linalg.norm(ulps)), group


# Slow: a method traced over two replicas (a minute and a half on two cores). make test keeps
# FixMatch's two replicas against one (methods/test_fixmatch.py; the same two-stream runner)
# and synchronised batch norm over two replicas (tests/models/test_distributed.py).
@pytest.mark.slow
def test_two_replicas_take_the_step_of_one(two_replica_strategy):
    """One step from the same weights at the full weight 100, decay 0.5 so that
    the teacher moves half the student's step; every copy equal on both replicas."""
    data = _data()
    settings = dict(consistency_weight=100.0, ema_decay=0.5)
    single = _method(tf.distribute.get_strategy(), **settings)
    mirrored = _method(two_replica_strategy, **settings)
    before = _weights(single)
    want = _run(single, data)
    got = _run(mirrored, data)
    assert want["consistency_weight"][0] == 100.0
    for model in ("model", "teacher"):
        for weight in getattr(mirrored, model).weights:
            copies = _values(weight)
            np.testing.assert_array_equal(copies[0], copies[1], err_msg=weight.path)
    _assert_same_step(single, mirrored, before, want, got)
    assert _values(mirrored.teacher_updates) == [1, 1]


# Slow: a mixed-precision method traced (20-60 s on two cores). make test keeps FixMatch's
# float16 step (methods/test_fixmatch.py: the same `SourceBaseline` step and loss scaling, its
# average model, which Mean Teacher's teacher is, kept in float32).
@pytest.mark.slow
@pytest.mark.parametrize("mixed_precision", ["float16", "bfloat16"])
def test_mixed_precision_steps_keep_a_float32_teacher_near_the_float32_one(mixed_precision,
                                                                          fresh):
    """One step: its loss within 5% of float32's (about a dozen roundings at
    bfloat16's eps 2^-8 = 0.4%); the float32 teacher's update points the way of
    the float32 run's."""
    skip_unless_computable(mixed_precision)
    strategy = tf.distribute.get_strategy()
    data = _data()
    plain, plain_runner = fresh()
    mixed = _method(strategy, mixed_precision=mixed_precision)
    assert isinstance(mixed.optimizer, keras.optimizers.LossScaleOptimizer) == (
        mixed_precision == "float16")
    start = [v.numpy() for v in plain.teacher.trainable_variables]
    want = _run(plain, data, runner=plain_runner)
    got = _run(mixed, data)
    assert all(v.dtype == "float32" for v in mixed.teacher.weights)
    for name in want:
        assert np.all(np.isfinite(got[name])), name
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=0.05)
    moved = np.concatenate([(v.numpy() - s).ravel() for v, s in
                            zip(plain.teacher.trainable_variables, start)])
    moved_mixed = np.concatenate([(v.numpy() - s).ravel() for v, s in
                                  zip(mixed.teacher.trainable_variables, start)])
    cosine = moved @ moved_mixed / (np.linalg.norm(moved) * np.linalg.norm(moved_mixed))
    assert cosine > 0.95


@pytest.mark.slow
def test_an_xla_compiled_step_gives_the_same_step():
    strategy = tf.distribute.get_strategy()
    data = _data()
    plain, compiled = _method(strategy), _method(strategy, jit_compile=True)
    before = _weights(plain)
    want = _run(plain, data)
    got = _run(compiled, data)
    _assert_same_step(plain, compiled, before, want, got)


def test_the_method_declares_its_state_evaluation_and_export(fresh):
    method, _ = fresh()
    assert set(method.checkpoint_items()) == {"teacher", "teacher_updates"}
    assert method.checkpoint_items()[MeanTeacherMethod.exported_item] is method.teacher
    assert method.evaluated_models() == {"": method.teacher, "student": method.model}
    assert not method.keeps_bank and method.bank is None
    assert method.phase(0) == method.phase(9) == "mean_teacher"


def test_settings_defaults_and_their_problems():
    """Every value defaults to its family's source: mean_teacher.py's weight 50, mse, linear
    ramp to 0.4, 64 + 64 images; imagenet_valid.py's 10, kl, 5 of 60 epochs, 20 of 40."""
    settings = MeanTeacherSettings()
    assert settings.resolved("fixmatch_cifar") == dict(
        consistency_weight=50.0, consistency_type="mse", consistency_rampup=0.4,
        unlabelled_ratio=1)
    assert settings.resolved("imagenet") == dict(
        consistency_weight=10.0, consistency_type="kl", consistency_rampup=5 / 60,
        unlabelled_ratio=1)
    assert MeanTeacherSettings(consistency_type="mse").resolved("imagenet")[
        "consistency_type"] == "mse"

    context = TrainConfig.from_settings(method="mean_teacher", baseline_preset="fixmatch_cifar",
                                        global_batch_size=128, run_dir="r").method_context()
    assert settings.problems(context) == []
    bad = MeanTeacherSettings(ema_horizon=0.0, consistency_weight=-1.0, consistency_type="l1",
                              consistency_rampup=1.5, unlabelled_ratio=0)
    problems = bad.problems(context)
    assert len(problems) == 5
    for flag in ("ema_horizon", "consistency", "consistency_type", "consistency_rampup",
                 "unlabelled_ratio"):
        assert any(f"{{mean_teacher_{flag}}}" in problem for problem in problems), flag


@pytest.mark.parametrize("method_name, item", [("mean_teacher", "teacher"),
                                               ("supervised", "model")])
def test_a_run_is_read_back_with_its_methods_exported_model(tmp_path, method_name, item, fresh):
    """run_loader (what export, predict, the probe and the analysis load) restores
    the method's exported item: Mean Teacher's teacher, not its student."""
    from llp_tf.after_training import run_loader
    from llp_tf.data.splits import regime
    from llp_tf.training import run_record
    from llp_tf.training.run_directory import RunDirectory
    from tests.runs import tiny_config

    config = tiny_config(tmp_path, "digits", method=method_name, embedding_dim=16,
                         width=0.125, architecture="resnet10", small_inputs=True,
                         image_size=SIZE)
    os.makedirs(config.run_dir)
    run_record.save_config(config)
    labels = np.arange(40) % C
    regime.save_splits(RunDirectory(config.run_dir).split_path, np.arange(8), np.arange(40),
                       labels)
    method, runner = fresh()
    _run(method, _data(), steps=2, runner=runner)
    models = {"model": method.model, "teacher": method.teacher}
    tf.train.Checkpoint(**models).save(os.path.join(config.run_dir, "checkpoints", "ckpt"))
    run = run_loader.load_run(config.run_dir)
    assert run.num_classes == C and run.step == 1
    for restored, want in zip(run.model.weights, models[item].weights, strict=True):
        np.testing.assert_array_equal(restored.numpy(), want.numpy(), err_msg=want.path)
    other = models["model" if item == "teacher" else "teacher"]
    assert not np.array_equal(run.model.trainable_variables[0].numpy(),
                              other.trainable_variables[0].numpy())


# ---- whole runs: training, resume after SIGKILL, export -------------------------

# A horizon of 3 of the 15 steps (the source's 0.1% would make the teacher the student).
RUN_SETTINGS = dict(method="mean_teacher", epochs=3, checkpoint_every=3, eval_every=1,
                    mean_teacher_ema_horizon=0.2)


@pytest.fixture(scope="module")
def mean_teacher_run(tmp_path_factory, stripes):
    """(config, final metrics) of an uninterrupted 3-epoch Mean Teacher run of 5
    steps per epoch, checkpointed at steps 3, 5, 6, 9, 10, 12 and 15."""
    import io

    from llp_tf.training import run_training
    from tests.runs import tiny_config
    config = tiny_config(tmp_path_factory.mktemp("mean_teacher"), stripes, **RUN_SETTINGS)
    return config, run_training(config, stream=io.StringIO())


# Slow: a whole run. make test keeps the method's declared evaluation and state
# (test_the_method_declares_its_state_evaluation_and_export), the teacher's updates
# (test_the_teacher_averages_...), and the pseudo-label run's second evaluated model and both
# models kept (methods/test_two_stream_runs.py).
@pytest.mark.slow
def test_a_run_reports_teacher_and_student_and_keeps_both(mean_teacher_run):
    from llp_tf.training.run_directory import RunDirectory
    config, final = mean_teacher_run
    rows = RunDirectory(config.run_dir).read_metrics()
    assert [row["epoch"] for row in rows] == [1, 2, 3]
    for name in ("val_top1", "val_top5", "val_categorisation", "val_student_top1",
                 "val_student_top5", "val_student_categorisation", "categorisation",
                 "consistency", "consistency_weight"):
        assert all(np.isfinite(row[name]) for row in rows), name
    assert "val_nn_top1" not in final and "val_student_nn_top1" not in final
    assert "val_examples" in final and "val_student_examples" not in final
    state = checkpoint_state(config.run_dir)
    assert state["teacher_updates/.ATTRIBUTES/VARIABLE_VALUE"] == 15
    for variable in ("category_head/_kernel", "category_head/bias"):
        key = f"{variable}/.ATTRIBUTES/VARIABLE_VALUE"
        assert not np.allclose(state[f"teacher/{key}"], state[f"model/{key}"]), variable


@pytest.mark.slow
def test_killed_twice_ends_as_the_uninterrupted_run(tmp_path, stripes, mean_teacher_run):
    import io

    from llp_tf.training import run_training
    from llp_tf.training.run_directory import RunDirectory
    from tests.runs import DriverProcess, tiny_config
    config = tiny_config(tmp_path, stripes, **RUN_SETTINGS)
    path = str(tmp_path / "config-to-train.json")
    with open(path, "w") as f:
        f.write(config.to_json())
    run = RunDirectory(config.run_dir)
    for point, last_checkpoint in (("step:8", 6), ("after_save:10", 10)):
        driver = DriverProcess(path, point)
        driver.wait_until_blocked()
        driver.kill()
        assert run.latest_checkpoint().endswith(f"ckpt-{last_checkpoint}"), point
    run_training(config, stream=io.StringIO())
    # The same process layout, restored from the same checkpoints: bit for bit.
    want, got = checkpoint_state(mean_teacher_run[0].run_dir), checkpoint_state(config.run_dir)
    assert set(got) == set(want) and any(k.startswith("teacher/") for k in want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    rows = run.read_metrics()
    reference = RunDirectory(mean_teacher_run[0].run_dir).read_metrics()
    assert [row["epoch"] for row in rows] == [1, 2, 3]
    for row, expected in zip(rows, reference):
        for name in ("val_top1", "val_student_top1", "loss", "consistency_weight"):
            assert row[name] == expected[name], name


# Slow: a whole run. make test keeps the teacher read back by run_loader, what the export
# reads (test_a_run_is_read_back_with_its_methods_exported_model), and the export tool on the
# pseudo-label run's exported item (methods/test_two_stream_runs.py).
@pytest.mark.slow
def test_export_classifies_with_the_teacher(mean_teacher_run, tmp_path):
    from llp_tf.after_training import run_loader
    from llp_tf.data.augmentation import eval_transform
    from tests.cli.tool_main import load_tool, run_main
    config = mean_teacher_run[0]
    output_dir = str(tmp_path / "model")
    code, stdout, stderr = run_main(load_tool("export.py"), f"--run_dir={config.run_dir}",
                                    f"--output_dir={output_dir}")
    assert code == 0, stderr
    assert "mean_teacher" in stdout
    images = np.random.default_rng(0).integers(0, 256, (3, SIZE * 2, SIZE * 2, 3), np.uint8)
    probabilities = tf.saved_model.load(output_dir).signatures["classify"](
        images=tf.constant(images))["probabilities"].numpy()
    run = run_loader.load_run(config.run_dir)
    inputs = tf.stack([eval_transform.eval_preprocess(tf.constant(image), config.data.image_size)
                       for image in images])
    logits = run.model(inputs, training=False)["logits"]
    np.testing.assert_allclose(probabilities, tf.nn.softmax(logits).numpy(), rtol=1e-4,
                               atol=1e-6)
