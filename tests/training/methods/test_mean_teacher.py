"""Mean Teacher: its step (the loss against the equations in float64, the
teacher's EMA and its ramp, the consistency ramp-up, replicas, precision, XLA)
and its runs (both models evaluated, resume after SIGKILL, the teacher read
back and exported)."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from llp_tf.models import precision
from llp_tf.models.factory import build_model
from llp_tf.training.methods import StepRunner
from llp_tf.training.methods.mean_teacher import (MeanTeacherMethod, MeanTeacherSettings,
                                                  consistency_cost, labelled_batch_size,
                                                  sigmoid_rampup)
from tests.models.helpers import skip_unless_computable
from tests.runs import checkpoint_state

C, SIZE = 4, 8
LABELLED, UNLABELLED = 4, 12  # a global batch of 16


def _model(strategy, mixed_precision="float32", sync_batch_norm=False, size=SIZE):
    with strategy.scope():
        return build_model("resnet10", C, embedding_dim=8, width=0.125, small_inputs=True,
                           sync_batch_norm=sync_batch_norm,
                           precision=mixed_precision).create_weights(size)


def _method(strategy, ema_decay=0.999, consistency_weight=10.0, consistency_type="mse",
            rampup_steps=4, mixed_precision="float32", sync_batch_norm=False,
            weight_decay=1e-4, jit_compile=False, size=SIZE):
    keras.utils.set_random_seed(1)
    model = _model(strategy, mixed_precision, sync_batch_norm, size)
    teacher = _model(strategy, mixed_precision, sync_batch_norm, size)
    with strategy.scope():
        optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
        optimizer.build(model.trainable_variables)
        optimizer = precision.wrap_optimizer(optimizer, mixed_precision,
                                             model.trainable_variables)
    return MeanTeacherMethod(
        strategy, model, optimizer, teacher, num_classes=C,
        global_batch_size=LABELLED + UNLABELLED, weight_decay=weight_decay,
        labelled_batch_size=LABELLED, ema_decay=ema_decay,
        consistency_weight=consistency_weight, consistency_type=consistency_type,
        consistency_rampup_steps=rampup_steps, jit_compile=jit_compile)


def _stream(rng, count, steps, labelled, same_views=False, size=SIZE):
    student = rng.normal(size=(count * steps, size, size, 3)).astype(np.float32)
    teacher = student if same_views else (
        student + rng.normal(scale=0.3, size=student.shape).astype(np.float32))
    return {"index": np.arange(count * steps, dtype=np.int64),
            "label": (np.arange(count * steps) % C if labelled
                      else np.full(count * steps, -1)).astype(np.int64),
            "student": student, "teacher": teacher}


def _data(steps=4, seed=0, same_views=False, size=SIZE):
    """The step's nested batches, ``steps`` global batches of each stream."""
    rng = np.random.default_rng(seed)
    return {"labelled": _stream(rng, LABELLED, steps, True, same_views, size),
            "unlabelled": _stream(rng, UNLABELLED, steps, False, same_views, size)}


def _global_batch(data, step):
    """The ``step``-th global batch of ``data``, as numpy."""
    return {name: {key: value[step * count:(step + 1) * count]
                   for key, value in data[name].items()}
            for name, count in (("labelled", LABELLED), ("unlabelled", UNLABELLED))}


def _iterator(strategy, data):
    """Each replica's share of each stream's global batch, as the pipeline splits it."""
    replicas = strategy.num_replicas_in_sync

    def dataset_fn(context):
        streams = {name: tf.data.Dataset.from_tensor_slices(data[name]).batch(
            count // replicas, drop_remainder=True)
            for name, count in (("labelled", LABELLED), ("unlabelled", UNLABELLED))}
        # Consecutive per-replica batches make up one global batch.
        return tf.data.Dataset.zip(streams)

    return iter(strategy.distribute_datasets_from_function(
        dataset_fn, tf.distribute.InputOptions(experimental_fetch_to_device=False)))


def _values(variable):
    """The per-replica copies of a (Keras or TF) variable, as numpy."""
    values = getattr(getattr(variable, "_value", variable), "values", None)
    return [v.numpy() for v in values] if values else [variable.numpy()]


def _softmax(logits):
    shifted = logits - logits.max(1, keepdims=True)
    return np.exp(shifted) / np.exp(shifted).sum(1, keepdims=True)


@pytest.mark.parametrize("consistency_type", ["mse", "kl"])
def test_the_loss_terms_are_the_equations_in_float64(consistency_type):
    strategy = tf.distribute.get_strategy()
    data = _data()
    batch = _global_batch(data, 0)
    method = _method(strategy, consistency_type=consistency_type, rampup_steps=0)
    # The logits the step sees: both models in training mode over the step's images.
    logits = method.model(np.concatenate([batch["labelled"]["student"],
                                          batch["unlabelled"]["student"]]),
                          training=True)["logits"].numpy().astype(np.float64)
    teacher = method.teacher(np.concatenate([batch["labelled"]["teacher"],
                                             batch["unlabelled"]["teacher"]]),
                             training=True)["logits"].numpy().astype(np.float64)
    method = _method(strategy, consistency_type=consistency_type, rampup_steps=0)
    metrics = StepRunner(method).run(_iterator(strategy, data), 1, "mean_teacher")
    total = LABELLED + UNLABELLED
    labels = batch["labelled"]["label"]
    log_p = np.log(_softmax(logits))
    cross_entropy = -log_p[np.arange(LABELLED), labels].sum() / total
    p_student, p_teacher = _softmax(logits), _softmax(teacher)
    if consistency_type == "mse":
        consistency = ((p_student - p_teacher) ** 2).sum() / C / total
    else:
        consistency = (p_teacher * (np.log(p_teacher) - log_p)).sum() / total
    np.testing.assert_allclose(metrics["categorisation"][0], cross_entropy, rtol=1e-5)
    np.testing.assert_allclose(metrics["consistency"][0], consistency, rtol=1e-4)
    assert consistency > 1e-4  # different views: the teacher disagrees
    np.testing.assert_allclose(metrics["consistency_weight"][0], 10.0, rtol=1e-6)
    np.testing.assert_allclose(
        metrics["loss"][0] - metrics["weight_decay"][0],
        cross_entropy + 10.0 * consistency, rtol=1e-5)


def test_no_gradient_reaches_the_teacher_and_the_consistency_is_zero_for_equal_outputs():
    logits = tf.constant(np.random.default_rng(0).normal(size=(5, C)), tf.float32)
    teacher = tf.Variable(logits + 1.0)  # a constant shift: the same softmax
    with tf.GradientTape(persistent=True) as tape:
        cost = tf.reduce_sum(consistency_cost(logits * 1.0, teacher * 1.0, "mse"))
    assert tape.gradient(cost, teacher) is None
    np.testing.assert_allclose(cost.numpy(), 0.0, atol=1e-12)


def test_the_teacher_is_the_ema_of_the_student_with_its_ramp_exactly():
    """alpha_t = min(1 - 1/(t+1), decay): 1/2, 2/3, then the decay 0.7."""
    strategy = tf.distribute.get_strategy()
    method = _method(strategy, ema_decay=0.7)
    for teacher, student in zip(method.teacher.weights, method.model.weights):
        np.testing.assert_array_equal(teacher.numpy(), student.numpy())
    iterator, runner = _iterator(strategy, _data()), StepRunner(method)
    for t, alpha in enumerate((1 / 2, 2 / 3, 0.7, 0.7), start=1):
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


def test_the_consistency_weight_ramps_up_as_a_sigmoid_per_step():
    rampup = 4
    want = [np.exp(-5.0 * (1.0 - min(t, rampup) / rampup) ** 2) for t in range(7)]
    got = [float(sigmoid_rampup(t, rampup).numpy()) for t in range(7)]
    np.testing.assert_allclose(got, want, rtol=1e-7)
    assert float(sigmoid_rampup(0, 0).numpy()) == 1.0
    strategy = tf.distribute.get_strategy()
    method = _method(strategy, consistency_weight=10.0, rampup_steps=rampup)
    metrics = StepRunner(method).run(_iterator(strategy, _data(steps=6)), 6, "mean_teacher")
    np.testing.assert_allclose(metrics["consistency_weight"], 10.0 * np.array(want[:6]),
                               rtol=1e-6)


def test_two_replicas_take_the_step_of_one(two_replica_strategy):
    data = _data()
    single = _method(tf.distribute.get_strategy(), sync_batch_norm=True)
    mirrored = _method(two_replica_strategy, sync_batch_norm=True)
    want = StepRunner(single).run(_iterator(single.strategy, data), 3, "mean_teacher")
    got = StepRunner(mirrored).run(_iterator(two_replica_strategy, data), 3, "mean_teacher")
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=2e-4, atol=2e-6, err_msg=name)
    for model in ("model", "teacher"):
        for a, b in zip(getattr(single, model).weights, getattr(mirrored, model).weights):
            copies = _values(b)
            np.testing.assert_array_equal(copies[0], copies[1], err_msg=b.path)
            np.testing.assert_allclose(copies[0], a.numpy(), rtol=1e-3, atol=1e-4,
                                       err_msg=a.path)
    assert _values(mirrored.teacher_updates) == [3, 3]


@pytest.mark.parametrize("mixed_precision", ["float16", "bfloat16"])
def test_mixed_precision_steps_keep_a_float32_teacher_near_the_float32_one(mixed_precision):
    skip_unless_computable(mixed_precision)
    strategy = tf.distribute.get_strategy()
    data = _data()
    plain = _method(strategy)
    mixed = _method(strategy, mixed_precision=mixed_precision)
    assert isinstance(mixed.optimizer, keras.optimizers.LossScaleOptimizer) == (
        mixed_precision == "float16")
    start = [v.numpy() for v in plain.teacher.trainable_variables]
    want = StepRunner(plain).run(_iterator(strategy, data), 2, "mean_teacher")
    got = StepRunner(mixed).run(_iterator(strategy, data), 2, "mean_teacher")
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
    plain, compiled = _method(strategy, size=32), _method(strategy, size=32, jit_compile=True)
    want = StepRunner(plain).run(_iterator(strategy, data), 2, "mean_teacher")
    got = StepRunner(compiled).run(_iterator(strategy, data), 2, "mean_teacher")
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-6, err_msg=name)
    for a, b in zip(plain.teacher.weights, compiled.teacher.weights):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-6, err_msg=a.path)


def test_the_method_declares_its_state_evaluation_and_export():
    method = _method(tf.distribute.get_strategy())
    assert set(method.checkpoint_items()) == {"teacher", "teacher_updates"}
    assert method.checkpoint_items()[MeanTeacherMethod.exported_item] is method.teacher
    assert method.evaluated_models() == {"": method.teacher, "student": method.model}
    assert not method.keeps_bank and method.bank is None
    assert method.phase(0) == method.phase(9) == "mean_teacher"


class _Config:
    """The parts of a `TrainConfig` the settings' problems read."""

    class optimization:  # noqa: N801
        global_batch_size = 128


def test_settings_defaults_and_their_problems():
    settings = MeanTeacherSettings()
    assert (settings.ema_decay, settings.consistency_weight, settings.consistency_type,
            settings.consistency_rampup_epochs, settings.labelled_fraction) == (
        0.999, 100.0, "mse", 5.0, 0.5)
    assert settings.problems(_Config) == []
    assert labelled_batch_size(0.5, 128) == 64 and labelled_batch_size(31 / 128, 128) == 31
    bad = MeanTeacherSettings(ema_decay=1.0, consistency_weight=-1.0,
                              consistency_rampup_epochs=-1.0, labelled_fraction=0.001)
    problems = bad.problems(_Config)
    assert len(problems) == 4
    assert "gives 0 labelled images per step" in problems[3]
    assert MeanTeacherSettings(labelled_fraction=1.0).problems(_Config)


@pytest.mark.parametrize("method_name, item", [("mean_teacher", "teacher"),
                                               ("supervised", "model")])
def test_a_run_is_read_back_with_its_methods_exported_model(tmp_path, method_name, item):
    """trained_run (what export, predict, the probe and the analysis load) restores
    the method's exported item: Mean Teacher's teacher, not its student."""
    from llp_tf.after_training import trained_run
    from llp_tf.data import splits
    from llp_tf.training import run_record
    from llp_tf.training.run_directory import RunDirectory
    from tests.runs import tiny_config

    config = tiny_config(tmp_path, "digits", method=method_name, embedding_dim=8,
                         image_size=SIZE)
    os.makedirs(config.run_dir)
    run_record.save_config(config)
    labels = np.arange(40) % C
    splits.save_splits(RunDirectory(config.run_dir).split_path, np.arange(8), np.arange(40),
                       labels)
    method = _method(tf.distribute.get_strategy())
    StepRunner(method).run(_iterator(method.strategy, _data()), 2, "mean_teacher")
    models = {"model": method.model, "teacher": method.teacher}
    tf.train.Checkpoint(**models).save(os.path.join(config.run_dir, "checkpoints", "ckpt"))
    run = trained_run.load_run(config.run_dir)
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
    for name in ("top1", "top5", "categorisation", "student_top1", "student_top5",
                 "student_categorisation", "train_consistency", "train_consistency_weight"):
        assert all(np.isfinite(row[name]) for row in rows), name
    assert "nn_top1" not in final and "student_nn_top1" not in final
    assert "examples" in final and "student_examples" not in final
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
    from tests.runs import tiny_config
    from tests.training.test_crash_resume import _Driver
    config = tiny_config(tmp_path, stripes, **RUN_SETTINGS)
    path = str(tmp_path / "config-to-train.json")
    with open(path, "w") as f:
        f.write(config.to_json())
    run = RunDirectory(config.run_dir)
    for point, last_checkpoint in (("step:8", 6), ("after_save:10", 10)):
        driver = _Driver(path, point)
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
        for name in ("top1", "student_top1", "train_loss", "train_ema_decay"):
            assert row[name] == pytest.approx(expected[name], rel=1e-4, abs=1e-5), name


def test_export_classifies_with_the_teacher(mean_teacher_run, tmp_path):
    from llp_tf.after_training import trained_run
    from llp_tf.data import augment
    from tests.tools.tool_main import load_tool, run_main
    config = mean_teacher_run[0]
    output_dir = str(tmp_path / "model")
    code, stdout, stderr = run_main(load_tool("export.py"), f"--run_dir={config.run_dir}",
                                    f"--output_dir={output_dir}")
    assert code == 0, stderr
    assert "mean_teacher" in stdout
    images = np.random.default_rng(0).integers(0, 256, (3, SIZE * 2, SIZE * 2, 3), np.uint8)
    probabilities = tf.saved_model.load(output_dir).signatures["classify"](
        images=tf.constant(images))["probabilities"].numpy()
    run = trained_run.load_run(config.run_dir)
    inputs = tf.stack([augment.eval_preprocess(tf.constant(image), config.data.image_size)
                       for image in images])
    logits = run.model(inputs, training=False)["logits"]
    np.testing.assert_allclose(probabilities, tf.nn.softmax(logits).numpy(), rtol=1e-4,
                               atol=1e-6)
