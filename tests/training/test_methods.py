import keras
import numpy as np
import pytest
import tensorflow as tf

from llp_tf import MemoryBank
from llp_tf.core import label_encoding
from llp_tf.models import precision
from llp_tf.models.factory import build_model
from llp_tf.training.methods import LLPMethod, StepRunner, SupervisedMethod, TrainingSplit
from llp_tf.training.methods.llp import LLPSettings
from llp_tf.training.step_metrics import StepRecords
from tests import numerics
from tests.models.helpers import skip_unless_computable
from tests.replica_batches import replica_iterator
from tests.same_state import FreshMethods, Path, StateCopier, logit_scale, model_weights
from tests.training.llp_steps import LLPComparison

N, C, D, B, SIZE = 32, 4, 16, 16, 8
LABELLED = np.arange(8)
LABELLED_CLASSES = np.arange(8) % C


def _data(seed=0, size=SIZE):
    rng = np.random.default_rng(seed)
    return {"image": rng.normal(size=(N, size, size, 3)).astype(np.float32),
            "label": (np.arange(N) % C).astype(np.int64),
            "index": rng.permutation(N).astype(np.int64)}


def _setup(strategy, propagation="local", sync_batch_norm=True, weight_decay=1e-4,
           jit_compile=False, mixed_precision="float32", size=SIZE):
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = build_model("resnet10", C, embedding_dim=D, width=0.125, small_inputs=True,
                            sync_batch_norm=sync_batch_norm,
                            precision=mixed_precision).create_weights(size)
        optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
        optimizer.build(model.trainable_variables)
        optimizer = precision.wrap_optimizer(optimizer, mixed_precision,
                                             model.trainable_variables)
        bank = MemoryBank(N, D, C, LABELLED, LABELLED_CLASSES, seed=3)
    return LLPMethod(strategy, model, optimizer, bank, num_classes=C, global_batch_size=B,
                     weight_decay=weight_decay,
                     settings=LLPSettings(temperature=0.07, k=3, t=4, propagation=propagation,
                                          weight_by_confidence=True, use_categorisation=True,
                                          density_chunk_size=8, warmup_epochs=1),
                     jit_compile=jit_compile)


def _supervised(method, weight_decay=None):
    """The supervised baseline on the same model and optimizer as ``method`` (and its weight
    decay, unless given)."""
    return SupervisedMethod(method.strategy, method.model, method.optimizer, num_classes=C,
                            global_batch_size=B,
                            weight_decay=method.weight_decay if weight_decay is None
                            else weight_decay, jit_compile=method.jit_compile)


def _iterator(strategy, data):
    """``data``'s stream of per-replica batches (B / R rows; LLP's "used", supervised's
    "labelled": the same batch in the stream of each method), dealt out as the pipeline does."""
    return replica_iterator(strategy, tf.data.Dataset.from_tensor_slices(data).repeat().batch(
        B // strategy.num_replicas_in_sync, drop_remainder=True).map(
            lambda batch: {"used": batch, "labelled": batch}))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """``fresh(strategy, **settings)``: `_setup`'s method in its initial state with its
    runner, built and traced once per module (`tests.same_state.FreshMethods`)."""
    return FreshMethods(tmp_path_factory.mktemp("initial")).per_setup(_setup)


#: The settings of the one-replica tests' shared method (`fresh`): one traced method for all.
ONE_REPLICA = dict(propagation="local", sync_batch_norm=False)


@pytest.fixture(scope="module")
def shared_supervised(fresh):
    """``shared_supervised()``: (the supervised baseline, its runner) on the model and optimizer of
    the one-replica tests' method (`ONE_REPLICA`), restored to their initial state; the
    baseline built and traced once per module."""
    made = []

    def restored():
        method, _ = fresh(tf.distribute.get_strategy(), **ONE_REPLICA)
        if not made:
            baseline = _supervised(method)
            made.append((baseline, StepRunner(baseline)))
        return made[0]

    return restored


def _run(method, data, llp_steps=4, runner=None):
    iterator = _iterator(method.strategy, data)
    runner = runner or StepRunner(method)
    warmup = runner.run(iterator, 2, "warmup")
    method.before_epoch(1, method.phase(1))  # the density refresh
    llp = runner.run(iterator, llp_steps, "llp")
    return warmup, llp


def _global_batch(data, step):
    """The global batch of 0-based ``step`` of `_iterator` (numpy, by key)."""
    rows = (np.arange(B) + step * B) % N
    return {name: value[rows] for name, value in data.items()}


#: Terms of the tiny network's chained sums over a global batch (`numerics.tiny_resnet_sums`).
SUMS = numerics.tiny_resnet_sums(B, SIZE)


@pytest.mark.slow  # 1.5 min on 2 cores; make test: the units over two replicas (docs/testing.md)
@pytest.mark.kernels
def test_two_replicas_take_the_steps_of_one_replica_from_the_same_state(two_replica_strategy,
                                                                         fresh, tmp_path):
    """Two warm-up steps, the density refresh and four LLP steps (pseudo labels
    read in the second LLP epoch), each from the one replica's state copied into
    the two replicas', compared per term to `tests.numerics`' bounds."""
    data = _data()
    paths = [Path(method, _iterator(method.strategy, data), runner=runner)
             for method, runner in (fresh(tf.distribute.get_strategy()),
                                    fresh(two_replica_strategy))]
    compare = LLPComparison(*paths, StateCopier(tmp_path), SUMS)
    for step in range(2):
        compare.step("warmup", _global_batch(data, step))
    compare.refresh()
    for step in range(2, 6):
        want, _ = compare.step("llp", _global_batch(data, step))
    assert want["pseudo_labelled"] == 1.0  # the last steps read pseudo labels


def test_llp_never_reads_the_true_labels_of_unlabelled_examples(fresh):
    """The same method from the same initial state on the data and on the data
    with its unlabelled examples' labels changed: bit-identical."""
    data = _data()
    scrambled = dict(data)
    unlabelled = ~np.isin(data["index"], LABELLED)
    scrambled["label"] = np.where(unlabelled, (data["label"] + 1) % C, data["label"])
    runs = []
    for given in (data, scrambled):
        method, runner = fresh(tf.distribute.get_strategy(), **ONE_REPLICA)
        runs.append((_run(method, given, runner=runner), method.bank.labels.numpy()))
    (metrics_a, labels_a), (metrics_b, labels_b) = runs
    for a, b in zip(metrics_a, metrics_b):
        assert a.weights.keys() == b.weights.keys()
        for records_a, records_b in ((a.values, b.values), (a.weights, b.weights)):
            for name in records_a:
                np.testing.assert_array_equal(records_a[name], records_b[name], err_msg=name)
    np.testing.assert_array_equal(labels_a, labels_b)


# knn is slow: local's step with the density weights left out, which make test keeps in
# tests/core (propagate against float64 with and without local weights).
@pytest.mark.parametrize("propagation", ["local", pytest.param("knn", marks=pytest.mark.slow),
                                         "classifier"])
def test_llp_steps_write_pseudo_labels_and_keep_true_ones(propagation, fresh):
    trainer, runner = fresh(tf.distribute.get_strategy(), propagation=propagation,
                            sync_batch_norm=False)
    before = trainer.bank.embeddings.numpy()
    data = _data()
    _, llp = _run(trainer, data, runner=runner)
    labels = trainer.bank.labels.numpy()
    confidence = trainer.bank.confidence.numpy()
    np.testing.assert_array_equal(labels[LABELLED], LABELLED_CLASSES)
    np.testing.assert_array_equal(confidence[LABELLED], 1.0)
    unlabelled = np.setdiff1d(np.arange(N), LABELLED)
    # Four LLP steps of 16 cover every example twice: all have pseudo classes now.
    assert np.all(label_encoding.is_class(labels[unlabelled], C).numpy())
    assert np.all((confidence[unlabelled] > 0) & (confidence[unlabelled] <= 1))
    assert not np.allclose(trainer.bank.embeddings.numpy(), before)
    np.testing.assert_allclose(np.linalg.norm(trainer.bank.embeddings.numpy(), axis=1), 1.0,
                               atol=1e-5)
    # The first LLP epoch reads instance ids for unlabelled examples, so only
    # the labelled ones of each batch count; the second reads the pseudo labels
    # written in the first.
    labelled_share = [np.isin(data["index"][:B], LABELLED).mean(),
                     np.isin(data["index"][B:], LABELLED).mean()]
    np.testing.assert_allclose(llp.values["pseudo_labelled"], labelled_share + [1.0, 1.0],
                               atol=1e-6)
    # confidence's weight records are the same share.
    np.testing.assert_array_equal(llp.weights["confidence"], llp.values["pseudo_labelled"])
    assert np.all(np.isfinite(llp.values["loss"]))


def test_confidence_is_the_mean_over_the_rows_that_have_a_class(fresh):
    trainer, runner = fresh(tf.distribute.get_strategy(), **ONE_REPLICA)
    data = _data()
    iterator = _iterator(trainer.strategy, data)
    runner.run(iterator, 2, "warmup")
    trainer.before_epoch(1, "llp")
    read, steps = [], []  # each LLP step's rows: (confidence, has a class) as it read them
    for step in range(4):
        rows = data["index"][(step % 2) * B:(step % 2 + 1) * B]
        has_class = label_encoding.is_class(trainer.bank.labels.numpy()[rows], C).numpy()
        read.append((trainer.bank.confidence.numpy()[rows].astype(np.float64), has_class))
        steps.append(runner.run(iterator, 1, "llp"))
    shown = StepRecords(*({name: np.concatenate([getattr(s, part)[name] for s in steps])
                           for name in getattr(steps[0], part)}
                          for part in ("values", "weights"))).means()
    confidence = np.concatenate([c for c, _ in read])
    has_class = np.concatenate([h for _, h in read])
    # The first LLP epoch (steps 1-2) reads instance ids for the unlabelled rows,
    # at confidence 1; the second reads pseudo labels of lower confidence.
    assert 0 < has_class[:2 * B].mean() < 1 and np.all(confidence[:2 * B][~has_class[:2 * B]] == 1)
    want = confidence[has_class].mean()
    assert want < confidence.mean() - 0.01  # a mean over every row would differ
    # float32 sums of 16 confidences in (0, 1] per step, and means of 4 steps:
    # each a relative error of about 1e-7; their quotient stays within 1e-6.
    assert shown["confidence"] == pytest.approx(want, rel=1e-6)
    assert shown["pseudo_labelled"] == pytest.approx(has_class.mean(), rel=1e-6)
    assert list(shown) == ["loss", "aggregation", "categorisation", "weight_decay",
                           "confidence", "pseudo_labelled"]


def test_warmup_loss_is_instance_discrimination_over_the_bank(fresh):
    trainer, _ = fresh(tf.distribute.get_strategy(), **ONE_REPLICA)
    data = _data()
    bank_before = trainer.bank.embeddings.numpy().astype(np.float64)
    batch = {k: v[:B] for k, v in data.items()}
    embeddings = trainer.model(batch["image"], training=True)["embedding"].numpy()
    # Restore the state the step starts from (the forward above moved BN statistics).
    trainer, runner = fresh(tf.distribute.get_strategy(), **ONE_REPLICA)
    metrics = runner.run(_iterator(trainer.strategy, data), 1, "warmup").values
    logits = embeddings.astype(np.float64) @ bank_before.T / 0.07
    own = logits[np.arange(B), batch["index"]]
    want = np.mean(np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1))
                   + logits.max(1) - own)
    np.testing.assert_allclose(metrics["aggregation"][0], want, rtol=1e-4)


def test_supervised_baseline_has_its_own_phase_and_no_bank(shared_supervised):
    strategy = tf.distribute.get_strategy()
    supervised, runner = shared_supervised()
    assert supervised.bank is None and supervised.checkpoint_items() == {}
    assert supervised.phase(0) == supervised.phase(7) == "supervised"
    metrics = runner.run(_iterator(strategy, _data()), 3, "supervised")
    assert list(metrics.values) == ["loss", "categorisation", "weight_decay"]
    assert metrics.weights == {}
    metrics = metrics.values
    assert metrics["categorisation"][0] == pytest.approx(np.log(C), rel=0.5)
    with pytest.raises(ValueError, match="phases"):
        runner.run(_iterator(strategy, _data()), 1, "llp")


def test_llp_method_phases_state_and_input():
    llp = _setup(tf.distribute.get_strategy(), sync_batch_norm=False)
    assert [llp.phase(e) for e in range(3)] == ["warmup", "llp", "llp"]
    assert not llp.tracks_plateau("warmup") and llp.tracks_plateau("llp")
    assert set(llp.checkpoint_items()) == {"bank", "density_epoch"}
    split = TrainingSplit(np.arange(4), np.arange(10), np.arange(4) % C)
    (name, used), = llp.input_spec(split).streams.items()
    assert name == "used" and used.index is split.used_index and used.batch_size == B
    assert dict(used.views) == {"image": "weak"} and not used.repeats
    (name, labelled), = _supervised(llp).input_spec(split).streams.items()
    assert name == "labelled" and labelled.index is split.labelled_index
    assert labelled.batch_size == B and dict(labelled.views) == {"image": "weak"}
    assert labelled.repeats
    # The density refresh runs once per LLP epoch, never in warm-up.
    calls = []
    llp.refresh_density = lambda: calls.append(1)
    for epoch in (0, 1, 1, 2):
        llp.before_epoch(epoch, llp.phase(epoch))
    assert len(calls) == 2 and int(llp.density_epoch.numpy()) == 2


def test_one_sgd_step_moves_a_weight_by_lr_times_data_gradient_plus_lambda_w(fresh):
    """The release's weight decay: the penalty lambda * sum(l2_loss(w)) has gradient lambda * w."""
    weight_decay, learning_rate = 0.05, 0.05  # a lambda large enough to see beside the data term
    strategy = tf.distribute.get_strategy()
    # The shared method's model and optimizer (momentum without history), initial.
    trainer = _supervised(fresh(strategy, **ONE_REPLICA)[0], weight_decay=weight_decay)
    model = trainer.model
    data = _data()
    batch = {k: v[:B] for k, v in data.items()}
    before = [v.numpy().astype(np.float64) for v in model.trainable_variables]
    with tf.GradientTape() as tape:
        logits = model(batch["image"], training=True)["logits"]
        data_loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(batch["label"], logits))
    # The embedding head gets no data gradient here, only its decay.
    data_gradients = [np.zeros(w.shape) if g is None else g.numpy().astype(np.float64)
                      for g, w in zip(tape.gradient(data_loss, model.trainable_variables),
                                      before)]
    # Momentum has no history at the first step, so the step is -lr * gradient.
    StepRunner(trainer).run(_iterator(strategy, data), 1, "supervised")
    decayed = {id(v) for v in model.weight_decay_variables()}
    assert decayed and len(decayed) < len(model.trainable_variables)
    for variable, w, g in zip(model.trainable_variables, before, data_gradients):
        decay = weight_decay * w if id(variable) in decayed else 0.0
        np.testing.assert_allclose(variable.numpy() - w, -learning_rate * (g + decay),
                                   rtol=1e-3, atol=1e-7, err_msg=variable.path)


def _supervised_step(paths, copier, batch, sums, replicas=1):
    """One supervised step of both `Path`s from the first's state, compared per
    term: the cross-entropy a softmax of C logits (`tests.numerics`), the weight
    decay a sum of squares of the same weights, and the weight moves."""
    want_method, got_method = (path.method for path in paths)
    copier.copy(want_method, got_method)
    start = model_weights(want_method.model)
    rtol = numerics.network_rtol(sums)
    logits = logit_scale(want_method.model, batch["image"], replicas)
    want, got = (path.step("supervised") for path in paths)
    decayed = sum(int(np.prod(w.shape)) for w in want_method.model.weight_decay_variables())
    decay = numerics.metric_bound(want["weight_decay"], decayed)
    categorisation = numerics.metric_bound(
        want["categorisation"], B, numerics.softmax_term_bound(rtol, logits, C))
    numerics.assert_same_metrics(want, got, {
        "weight_decay": decay, "categorisation": categorisation,
        "loss": decay + categorisation + numerics.reordered_sum_bound(2, want["loss"])})
    numerics.assert_same_step_moves(start, model_weights(want_method.model),
                                    model_weights(got_method.model), numerics.step_rtol(sums))


# XLA compiles: 20-25 s on 2 cores at one replica, a minute at two (4 minutes with oneDNN at
# AVX2, where CI reruns one replica only).
@pytest.mark.slow
@pytest.mark.parametrize("replicas", [pytest.param(1, marks=pytest.mark.kernels), 2])
def test_an_xla_compiled_step_gives_the_same_results(replicas, two_replica_strategy, tmp_path):
    """Two warm-up steps, the density refresh, an LLP step and two supervised
    steps, compiled with XLA or not, each from the plain path's state, per term
    (`tests.numerics`). 32 px images: with a last feature map below 4x4 XLA's
    gradients are wrong (the config refuses it).
    """
    strategy = two_replica_strategy if replicas == 2 else tf.distribute.get_strategy()
    data = _data(size=32)
    plain = _setup(strategy, sync_batch_norm=False, size=32)
    compiled = _setup(strategy, sync_batch_norm=False, jit_compile=True, size=32)
    copier = StateCopier(tmp_path)
    sums = numerics.tiny_resnet_sums(B, 32)
    compare = LLPComparison(*(Path(m, _iterator(strategy, data)) for m in (plain, compiled)),
                            copier, sums, logits_replicas=replicas)
    for step in range(2):
        compare.step("warmup", _global_batch(data, step))
    compare.refresh()
    compare.step("llp", _global_batch(data, 2))
    paths = [Path(_supervised(m), _iterator(strategy, data)) for m in (plain, compiled)]
    for step in range(2):
        _supervised_step(paths, copier, _global_batch(data, step), sums, replicas)


def test_float16_scales_the_loss_and_skips_a_step_whose_gradients_overflow(shared_supervised):
    skip_unless_computable("float16")
    strategy = tf.distribute.get_strategy()
    scaled = _supervised(_setup(strategy, sync_batch_norm=False, mixed_precision="float16"))
    plain, plain_runner = shared_supervised()  # the same initial weights
    assert isinstance(scaled.optimizer, keras.optimizers.LossScaleOptimizer)
    data = _data()
    before = [v.numpy() for v in plain.model.trainable_variables]
    # The overflowing step below reuses the scaled runner's traced loop.
    scaled_runner = StepRunner(scaled)
    for runner in (plain_runner, scaled_runner):
        runner.run(_iterator(strategy, data), 1, "supervised")
    # At the initial scale 2^15 the float16 gradients stay finite: the step is
    # taken, unscaled (not 2^15 times too long), along the float32 one; float16
    # activations (3 digits) through batch norms over 16 images turn it by a few degrees.
    moved = np.concatenate([(a.numpy() - w).ravel()
                            for a, w in zip(plain.model.trainable_variables, before)])
    moved16 = np.concatenate([(a.numpy() - w).ravel()
                              for a, w in zip(scaled.model.trainable_variables, before)])
    assert 0.95 < np.linalg.norm(moved16) / np.linalg.norm(moved) < 1.05
    assert moved16 @ moved / (np.linalg.norm(moved16) * np.linalg.norm(moved)) > 0.99
    assert float(scaled.optimizer.dynamic_scale.numpy()) == 2.0 ** 15
    # A scale of 2^100 overflows float16 in the backward pass: the step is
    # skipped (no weight moves) and the scale halves.
    scaled.optimizer.dynamic_scale.assign(2.0 ** 100)
    held = [v.numpy() for v in scaled.model.trainable_variables]
    scaled_runner.run(_iterator(strategy, data), 1, "supervised")
    for variable, value in zip(scaled.model.trainable_variables, held):
        np.testing.assert_array_equal(variable.numpy(), value, err_msg=variable.path)
    assert float(scaled.optimizer.dynamic_scale.numpy()) == 2.0 ** 99


def test_the_runner_reports_each_step_of_a_loop_on_the_host_while_it_runs(fresh):
    method, runner = fresh(tf.distribute.get_strategy(), **ONE_REPLICA)
    iterator = _iterator(method.strategy, _data())
    done = []
    metrics = runner.run(iterator, 3, "warmup", on_step=done.append)
    assert done == [1, 2, 3] and metrics.values["loss"].shape == (3,)
    # Without a callback the same traced loop runs, reporting to no one.
    assert runner.run(iterator, 2, "warmup").values["loss"].shape == (2,) and done == [1, 2, 3]


def _device_side_data(seed=0):
    """(host data: the augmented float32 images; device data: the uint8 crops
    with their random choices) of the same N examples (`llp_tf.data.augmentation.views`)."""
    from llp_tf.data.augmentation import weak
    rng = np.random.default_rng(seed)
    crops = rng.integers(0, 256, (N, SIZE, SIZE, 3)).astype(np.uint8)
    params = [weak.draw_pixel_params(tf.constant([seed, k], tf.int64)) for k in range(N)]
    host = [weak.normalize(weak.apply_pixel_params(weak.to_unit(crop), p)).numpy()
            for crop, p in zip(crops, params)]
    labels = _data(seed)
    stacked = {name: np.stack([p[name].numpy() for p in params]) for name in params[0]}
    return (dict(labels, image=np.stack(host)),
            dict(labels, image=crops, augment={"image": stacked}))


@pytest.mark.slow  # 2 replicas; make test: test_step_runner.py, data/augmentation/test_views.py
def test_the_runner_finishes_device_side_batches_in_each_replica(two_replica_strategy, fresh,
                                                                 tmp_path):
    """StepRunner's ``prepare`` (`streams.finish_batch`, --augment_on=device) runs
    in each replica before the step: two warm-up steps on shipped uint8 crops and
    choices, each from the host path's state, equal those on the host-augmented
    images, per term (`tests.numerics`). The device-side images lie within 1e-6 of
    the host's (tests/data/augmentation/test_views.py): a relative input error
    of 1e-6 over their root mean square."""
    from llp_tf.data.pipeline import streams
    host_data, device_data = _device_side_data()
    spec = {name: streams.Stream(np.arange(N), B) for name in ("used", "labelled")}
    host, host_runner = fresh(two_replica_strategy)
    device = _setup(two_replica_strategy)
    paths = [Path(host, _iterator(two_replica_strategy, host_data), runner=host_runner),
             Path(device, _iterator(two_replica_strategy, device_data),
                  lambda batch: streams.finish_batch(batch, spec, "paper"))]
    input_rtol = 1e-6 / np.sqrt(np.mean(np.square(host_data["image"].astype(np.float64))))
    compare = LLPComparison(*paths, StateCopier(tmp_path), SUMS, input_rtol=input_rtol)
    for step in range(2):
        compare.step("warmup", _global_batch(host_data, step))
