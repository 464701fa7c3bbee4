"""Mean Teacher: its step (the loss against the equations in float64, the
teacher's EMA and its step-function decay, the consistency weight's ramp-up
and labelled-share scale against the TF release's formula, replicas,
precision, XLA) and its runs (both models evaluated, resume after SIGKILL,
the teacher read back and exported)."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from llp_tf.models import precision
from llp_tf.models.factory import build_model, build_model_from_config
from llp_tf.training.methods import StepRunner, TrainingSplit, method_class
from llp_tf.training.methods.mean_teacher import (VIEWS, MeanTeacherMethod,
                                                  MeanTeacherSettings, consistency_cost,
                                                  sigmoid_rampup)
from tests.models.helpers import skip_unless_computable
from tests.runs import checkpoint_state

C, SIZE = 4, 8
G = 16  # a global batch
# Where a step's labelled images sit ('vary' batches: anywhere, some steps none).
LABELLED_AT = (1, 6, 7, 12)
# The split a test method is given: its settings do not scale the consistency weight by it.
_UNSCALED = TrainingSplit(np.array(LABELLED_AT), np.arange(G), np.arange(len(LABELLED_AT)))


def _model(strategy, mixed_precision="float32", sync_batch_norm=False, size=SIZE):
    with strategy.scope():
        return build_model("resnet10", C, embedding_dim=8, width=0.125, small_inputs=True,
                           sync_batch_norm=sync_batch_norm,
                           precision=mixed_precision).create_weights(size)


def _optimizer(strategy, model, mixed_precision="float32"):
    with strategy.scope():
        optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
        optimizer.build(model.trainable_variables)
        return precision.wrap_optimizer(optimizer, mixed_precision, model.trainable_variables)


def _method(strategy, ema_decay=(0.999, 0.999), consistency_weight=10.0,
            consistency_type="mse", rampup_steps=4, mixed_precision="float32",
            sync_batch_norm=False, weight_decay=1e-4, jit_compile=False, size=SIZE):
    keras.utils.set_random_seed(1)
    model = _model(strategy, mixed_precision, sync_batch_norm, size)
    teacher = _model(strategy, mixed_precision, sync_batch_norm, size)
    return MeanTeacherMethod(
        strategy, model, _optimizer(strategy, model, mixed_precision), teacher,
        num_classes=C, global_batch_size=G, weight_decay=weight_decay,
        settings=MeanTeacherSettings(
            consistency_weight=consistency_weight, scale_consistency_by_labels=False,
            consistency_type=consistency_type, consistency_rampup_steps=rampup_steps,
            ema_decay_during_rampup=ema_decay[0], ema_decay_after_rampup=ema_decay[1]),
        split=_UNSCALED, jit_compile=jit_compile)


def _data(steps=4, seed=0, same_views=False, size=SIZE, unlabelled_steps=()):
    """``steps`` global batches of the one stream, as numpy: a class at the
    `LABELLED_AT` positions of each step (none in ``unlabelled_steps``), -1
    elsewhere."""
    rng = np.random.default_rng(seed)
    count = G * steps
    student = rng.normal(size=(count, size, size, 3)).astype(np.float32)
    teacher = student if same_views else (
        student + rng.normal(scale=0.3, size=student.shape).astype(np.float32))
    position, step = np.arange(count) % G, np.arange(count) // G
    labelled = np.isin(position, LABELLED_AT) & ~np.isin(step, unlabelled_steps)
    return {"used": {"index": np.arange(count, dtype=np.int64),
                     "label": np.where(labelled, np.arange(count) % C, -1).astype(np.int64),
                     "student": student, "teacher": teacher}}


def _global_batch(data, step):
    """The ``step``-th global batch of ``data``'s stream, as numpy."""
    return {key: value[step * G:(step + 1) * G] for key, value in data["used"].items()}


def _iterator(strategy, data):
    """Each replica's share of each global batch, as the pipeline splits it."""
    replicas = strategy.num_replicas_in_sync

    def dataset_fn(context):
        # Consecutive per-replica batches make up one global batch.
        return tf.data.Dataset.zip({"used": tf.data.Dataset.from_tensor_slices(
            data["used"]).batch(G // replicas, drop_remainder=True)})

    return iter(strategy.distribute_datasets_from_function(
        dataset_fn, tf.distribute.InputOptions(experimental_fetch_to_device=False)))


def _values(variable):
    """The per-replica copies of a (Keras or TF) variable, as numpy."""
    values = getattr(getattr(variable, "_value", variable), "values", None)
    return [v.numpy() for v in values] if values else [variable.numpy()]


def _softmax(logits):
    shifted = logits - logits.max(1, keepdims=True)
    return np.exp(shifted) / np.exp(shifted).sum(1, keepdims=True)


def _release_weight(t, rampup_steps, max_cost):
    """float64 of the MT TF release's consistency coefficient at global step t
    (model.py: max_consistency_cost * sigmoid_rampup, exp(-5 phase^2) with
    phase = 1 - max(0, t) / T while t < T, 1 after)."""
    if t >= rampup_steps:
        return max_cost
    phase = 1.0 - max(0.0, t) / rampup_steps
    return max_cost * np.exp(-5.0 * phase * phase)


@pytest.mark.parametrize("consistency_type", ["mse", "kl"])
def test_the_loss_terms_are_the_equations_in_float64(consistency_type):
    strategy = tf.distribute.get_strategy()
    data = _data(unlabelled_steps=(1,))
    batch = _global_batch(data, 0)
    method = _method(strategy, consistency_type=consistency_type, rampup_steps=0)
    # The logits the step sees: both models in training mode over the step's images.
    logits = method.model(batch["student"], training=True)["logits"].numpy().astype(
        np.float64)
    teacher = method.teacher(batch["teacher"], training=True)["logits"].numpy().astype(
        np.float64)
    method = _method(strategy, consistency_type=consistency_type, rampup_steps=0)
    metrics = StepRunner(method).run(_iterator(strategy, data), 2, "mean_teacher")
    labels = batch["label"]
    labelled = np.flatnonzero(labels >= 0)
    assert list(labelled) == list(LABELLED_AT)
    log_p = np.log(_softmax(logits))
    # Divided by the whole batch, not by the labelled count.
    cross_entropy = -log_p[labelled, labels[labelled]].sum() / G
    p_student, p_teacher = _softmax(logits), _softmax(teacher)
    if consistency_type == "mse":
        consistency = ((p_student - p_teacher) ** 2).sum() / C / G
    else:
        consistency = (p_teacher * (np.log(p_teacher) - log_p)).sum() / G
    np.testing.assert_allclose(metrics["categorisation"][0], cross_entropy, rtol=1e-5)
    np.testing.assert_allclose(metrics["consistency"][0], consistency, rtol=1e-4)
    assert consistency > 1e-4  # different views: the teacher disagrees
    np.testing.assert_allclose(metrics["consistency_weight"][0], 10.0, rtol=1e-6)
    np.testing.assert_allclose(
        metrics["loss"][0] - metrics["weight_decay"][0],
        cross_entropy + 10.0 * consistency, rtol=1e-5)
    # A 'vary' batch without a labelled image: consistency alone.
    assert metrics["categorisation"][1] == 0.0 and metrics["consistency"][1] > 0


def test_no_gradient_reaches_the_teacher_and_the_consistency_is_zero_for_equal_outputs():
    logits = tf.constant(np.random.default_rng(0).normal(size=(5, C)), tf.float32)
    teacher = tf.Variable(logits + 1.0)  # a constant shift: the same softmax
    with tf.GradientTape(persistent=True) as tape:
        cost = tf.reduce_sum(consistency_cost(logits * 1.0, teacher * 1.0, "mse"))
    assert tape.gradient(cost, teacher) is None
    np.testing.assert_allclose(cost.numpy(), 0.0, atol=1e-12)


def test_the_teacher_is_the_ema_of_the_student_with_the_releases_step_decay_exactly():
    """The decay is a step function of the steps done before the update (TF
    release, model.py step_rampup): 0.5 for the first T = 2 updates, then 0.7."""
    strategy = tf.distribute.get_strategy()
    method = _method(strategy, ema_decay=(0.5, 0.7), rampup_steps=2)
    for teacher, student in zip(method.teacher.weights, method.model.weights):
        np.testing.assert_array_equal(teacher.numpy(), student.numpy())
    iterator, runner = _iterator(strategy, _data()), StepRunner(method)
    for t, alpha in enumerate((0.5, 0.5, 0.7, 0.7), start=1):
        before = [v.numpy() for v in method.teacher.trainable_variables]
        metrics = runner.run(iterator, 1, "mean_teacher")
        assert metrics["ema_decay"][0] == np.float32(alpha)
        assert int(method.teacher_updates.numpy()) == t
        alpha = np.float32(alpha)
        for teacher, old, student in zip(method.teacher.trainable_variables, before,
                                         method.model.trainable_variables):
            np.testing.assert_array_equal(
                teacher.numpy(), alpha * old + (np.float32(1) - alpha) * student.numpy(),
                err_msg=teacher.path)
        assert not np.allclose(method.teacher.trainable_variables[0].numpy(),
                               method.model.trainable_variables[0].numpy())


def test_the_teacher_keeps_its_own_batch_norm_statistics():
    """With equal views and weights, the first step's teacher forward gives the
    student's moments: its moving statistics equal the student's (an EMA of the
    student's would be half the old ones); with other views they differ."""
    strategy = tf.distribute.get_strategy()
    method = _method(strategy)
    layers = method.model.batch_norm_layers(), method.teacher.batch_norm_layers()
    initial = [layer.moving_mean.numpy() for layer in layers[0]]
    StepRunner(method).run(_iterator(strategy, _data(same_views=True)), 1, "mean_teacher")
    for student, teacher, start in zip(*layers, initial):
        np.testing.assert_allclose(teacher.moving_mean.numpy(), student.moving_mean.numpy(),
                                   rtol=1e-6, atol=1e-7, err_msg=teacher.name)
        np.testing.assert_allclose(teacher.moving_variance.numpy(),
                                   student.moving_variance.numpy(), rtol=1e-6, atol=1e-7)
    assert not np.allclose(layers[0][0].moving_mean.numpy(), initial[0])
    method = _method(strategy)
    StepRunner(method).run(_iterator(strategy, _data()), 1, "mean_teacher")
    assert not np.allclose(layers[0][0].moving_mean.numpy(),
                           method.teacher.batch_norm_layers()[0].moving_mean.numpy())


def test_the_consistency_weight_is_the_releases_ramp_and_labelled_share():
    """w(t) against the TF release's formula in float64: max_consistency_cost =
    100 x n_labeled / N (cifar10_final_eval.py), times the sigmoid ramp."""
    rampup = 4
    want = [np.exp(-5.0 * (1.0 - min(t, rampup) / rampup) ** 2) for t in range(7)]
    got = [float(sigmoid_rampup(t, rampup).numpy()) for t in range(7)]
    np.testing.assert_allclose(got, want, rtol=1e-7)
    assert float(sigmoid_rampup(0, 0).numpy()) == 1.0
    # 4,000 labels of CIFAR-10's 50,000: the release's 8.
    split = TrainingSplit(np.arange(4000), np.arange(50000), np.zeros(4000, np.int64))
    assert MeanTeacherSettings().max_consistency_weight(split) == pytest.approx(8.0, rel=1e-12)
    split = TrainingSplit(np.array([2, 9, 30]), np.arange(40), np.array([0, 1, 2]))
    max_cost = MeanTeacherSettings().max_consistency_weight(split)
    assert max_cost == pytest.approx(100.0 * 3 / 40, rel=1e-12)
    assert MeanTeacherSettings(scale_consistency_by_labels=False).max_consistency_weight(
        split) == 100.0
    strategy = tf.distribute.get_strategy()
    method = _method(strategy, consistency_weight=max_cost, rampup_steps=rampup)
    metrics = StepRunner(method).run(_iterator(strategy, _data(steps=6)), 6, "mean_teacher")
    np.testing.assert_allclose(metrics["consistency_weight"],
                               [_release_weight(t, rampup, max_cost) for t in range(6)],
                               rtol=1e-6)
    # The ramp's end also switches the decay (equal here: the release's CIFAR-10 values).
    np.testing.assert_array_equal(metrics["ema_decay"], np.float32(0.999))


def test_from_config_scales_the_weight_and_reads_one_vary_stream(tmp_path):
    from tests.runs import tiny_config
    config = tiny_config(tmp_path, "digits", method="mean_teacher", embedding_dim=8,
                         mean_teacher_consistency_rampup_steps=331,
                         mean_teacher_ema_decay_during_rampup=0.99)
    strategy = tf.distribute.get_strategy()
    with strategy.scope():
        model = build_model_from_config(config.model, C, config.data.image_size)
    split = TrainingSplit(np.array([1, 5]), np.arange(12), np.array([0, 1]))
    method = method_class("mean_teacher").from_config(config, strategy, model,
                                                      _optimizer(strategy, model), C, split)
    assert isinstance(method, MeanTeacherMethod)
    assert method.consistency_weight == pytest.approx(100.0 * 2 / 12, rel=1e-12)
    assert (method.consistency_rampup_steps, method.ema_decay_during_rampup,
            method.ema_decay_after_rampup) == (331, 0.99, 0.999)
    streams_read = method.input_spec(split).streams
    assert list(streams_read) == ["used"]
    used = streams_read["used"]
    assert used.batch_size == config.optimization.global_batch_size and not used.repeats
    np.testing.assert_array_equal(used.index, np.arange(12))
    assert dict(used.views) == VIEWS
    unscaled = method_class("mean_teacher").from_config(
        config.replace(mean_teacher_scale_consistency_by_labels=False), strategy, model,
        _optimizer(strategy, model), C, split)
    assert unscaled.consistency_weight == 100.0


# The step's longest float32 reductions, the batch-norm moments and the first
# stage's kernel gradients, sum G x S^2 terms (1,024 at 8 px). Summed in another
# order (per replica, then over replicas; or fused by XLA), such a sum moves by
# at most n * eps (eps = 2^-24) of the sum of its terms' magnitudes: 6.1e-5 at
# 8 px. Two ways of taking one step agree to that, relative, in each metric and
# in each update (measured: below 1e-5).
def _reordered_sum_rtol(size):
    return G * size * size * 2.0 ** -24


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


def test_two_replicas_take_the_step_of_one(two_replica_strategy):
    """One step at the full weight 100 (no ramp), decay 0.5 so that the teacher
    moves half the student's step."""
    data = _data()
    settings = dict(sync_batch_norm=True, consistency_weight=100.0, rampup_steps=0,
                    ema_decay=(0.5, 0.5))
    single = _method(tf.distribute.get_strategy(), **settings)
    mirrored = _method(two_replica_strategy, **settings)
    before = _weights(single)
    want = StepRunner(single).run(_iterator(single.strategy, data), 1, "mean_teacher")
    got = StepRunner(mirrored).run(_iterator(two_replica_strategy, data), 1, "mean_teacher")
    assert want["consistency_weight"][0] == 100.0
    for model in ("model", "teacher"):
        for b in getattr(mirrored, model).weights:
            copies = _values(b)
            np.testing.assert_array_equal(copies[0], copies[1], err_msg=b.path)
    _assert_same_step(single, mirrored, before, want, got)
    assert _values(mirrored.teacher_updates) == [1, 1]


@pytest.mark.parametrize("mixed_precision", ["float16", "bfloat16"])
def test_mixed_precision_steps_keep_a_float32_teacher_near_the_float32_one(mixed_precision):
    """One step: its loss within 5% of float32's (about a dozen roundings at
    bfloat16's eps 2^-8 = 0.4%); the float32 teacher's update points the way of
    the float32 run's."""
    skip_unless_computable(mixed_precision)
    strategy = tf.distribute.get_strategy()
    data = _data()
    plain = _method(strategy, ema_decay=(0.5, 0.5))
    mixed = _method(strategy, ema_decay=(0.5, 0.5), mixed_precision=mixed_precision)
    assert isinstance(mixed.optimizer, keras.optimizers.LossScaleOptimizer) == (
        mixed_precision == "float16")
    start = [v.numpy() for v in plain.teacher.trainable_variables]
    want = StepRunner(plain).run(_iterator(strategy, data), 1, "mean_teacher")
    got = StepRunner(mixed).run(_iterator(strategy, data), 1, "mean_teacher")
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
    """32 px images: XLA needs a last feature map of at least 4x4."""
    strategy = tf.distribute.get_strategy()
    data = _data(size=32)
    settings = dict(size=32, consistency_weight=100.0, rampup_steps=0, ema_decay=(0.5, 0.5))
    plain, compiled = _method(strategy, **settings), _method(strategy, jit_compile=True,
                                                             **settings)
    before = _weights(plain)
    want = StepRunner(plain).run(_iterator(strategy, data), 1, "mean_teacher")
    got = StepRunner(compiled).run(_iterator(strategy, data), 1, "mean_teacher")
    _assert_same_step(plain, compiled, before, want, got, size=32)


def test_the_method_declares_its_state_evaluation_and_export():
    method = _method(tf.distribute.get_strategy())
    assert set(method.checkpoint_items()) == {"teacher", "teacher_updates"}
    assert method.checkpoint_items()[MeanTeacherMethod.exported_item] is method.teacher
    assert method.evaluated_models() == {"": method.teacher, "student": method.model}
    assert not method.keeps_bank and method.bank is None
    assert method.phase(0) == method.phase(9) == "mean_teacher"


def test_settings_defaults_and_their_problems():
    """The defaults of the TF release's single-head CIFAR-10 runs."""
    settings = MeanTeacherSettings()
    assert (settings.consistency_weight, settings.scale_consistency_by_labels,
            settings.consistency_type, settings.consistency_rampup_steps,
            settings.ema_decay_during_rampup, settings.ema_decay_after_rampup) == (
        100.0, True, "mse", 40000, 0.999, 0.999)
    assert settings.problems(None) == []
    bad = MeanTeacherSettings(ema_decay_during_rampup=1.0, ema_decay_after_rampup=-0.1,
                              consistency_weight=-1.0, consistency_rampup_steps=-1)
    problems = bad.problems(None)
    assert len(problems) == 4
    for flag in ("ema_decay_during_rampup", "ema_decay_after_rampup", "consistency",
                 "consistency_rampup_steps"):
        assert any(f"{{mean_teacher_{flag}}}" in problem for problem in problems), flag


@pytest.mark.parametrize("method_name, item", [("mean_teacher", "teacher"),
                                               ("supervised", "model")])
def test_a_run_is_read_back_with_its_methods_exported_model(tmp_path, method_name, item):
    """run_loader (what export, predict, the probe and the analysis load) restores
    the method's exported item: Mean Teacher's teacher, not its student."""
    from llp_tf.after_training import run_loader
    from llp_tf.data.splits import regime
    from llp_tf.training import run_record
    from llp_tf.training.run_directory import RunDirectory
    from tests.runs import tiny_config

    config = tiny_config(tmp_path, "digits", method=method_name, embedding_dim=8,
                         image_size=SIZE)
    os.makedirs(config.run_dir)
    run_record.save_config(config)
    labels = np.arange(40) % C
    regime.save_splits(RunDirectory(config.run_dir).split_path, np.arange(8), np.arange(40),
                       labels)
    method = _method(tf.distribute.get_strategy())
    StepRunner(method).run(_iterator(method.strategy, _data()), 2, "mean_teacher")
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

RUN_SETTINGS = dict(method="mean_teacher", epochs=3, checkpoint_every=3, eval_every=1)


@pytest.fixture(scope="module")
def mean_teacher_run(tmp_path_factory, stripes):
    """(config, final metrics) of an uninterrupted 3-epoch Mean Teacher run of 5
    steps per epoch, checkpointed at steps 3, 5, 6, 9, 10, 12 and 15."""
    import io

    from llp_tf.training import run_training
    from tests.runs import tiny_config
    config = tiny_config(tmp_path_factory.mktemp("mean_teacher"), stripes, **RUN_SETTINGS)
    return config, run_training(config, stream=io.StringIO())


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
    want, got = checkpoint_state(mean_teacher_run[0].run_dir), checkpoint_state(config.run_dir)
    assert set(got) == set(want) and any(k.startswith("teacher/") for k in want)
    for name in want:
        if want[name].dtype.kind in "iub":
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        else:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5,
                                       err_msg=name)
    rows = run.read_metrics()
    reference = RunDirectory(mean_teacher_run[0].run_dir).read_metrics()
    assert [row["epoch"] for row in rows] == [1, 2, 3]
    for row, expected in zip(rows, reference):
        for name in ("val_top1", "val_student_top1", "loss", "ema_decay"):
            assert row[name] == pytest.approx(expected[name], rel=1e-4, abs=1e-5), name


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
