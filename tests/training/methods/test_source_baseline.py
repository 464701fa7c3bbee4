"""The baselines' optimiser hook: a source step is Keras-form Nesterov SGD at the base rate
times the schedule's factor of t / S (against float64 numpy), weight decay over the recipe's
weights, the average over the recipe's weights; LLP and supervised keep the protocol's SGD."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from llp_tf.training import assembly
from llp_tf.training import schedule
from llp_tf.training.config import TrainConfig
from llp_tf.training.methods import method_class, recipes
from llp_tf.training.methods.base import OptimizerSpec
from llp_tf.training.methods.fixmatch import FixMatchMethod, FixMatchSettings
from llp_tf.training.methods.pseudo_label import PseudoLabelMethod, PseudoLabelSettings
from tests.training.methods.two_streams import C, tiny_model

STEPS = 1000


@pytest.fixture(scope="module")
def initial_models(tmp_path_factory):
    """``initial_models()``: a model and an average, two `tiny_model`s built once per module,
    restored to their initial weights on every call (through a checkpoint)."""
    strategy = tf.distribute.get_strategy()
    model, _ = tiny_model(strategy)
    average, _ = tiny_model(strategy)
    checkpoint = tf.train.Checkpoint(model=model, average=average)
    path = checkpoint.write(str(tmp_path_factory.mktemp("initial") / "models"))

    def restored():
        checkpoint.read(path).assert_existing_objects_matched()
        return model, average

    return restored


def _with_spec(initial_models, method_type, family="fixmatch_cifar", source=True, **kwargs):
    """A method over `initial_models` whose SGD is built from the method's `OptimizerSpec`."""
    strategy = tf.distribute.get_strategy()
    model, average = initial_models()
    labelled = 16 // 6 if family == "imagenet" else 16 // 8
    recipe = (recipes.fixmatch_imagenet(labelled) if family == "imagenet"
              else recipes.cifar_code("fixmatch.py"))
    optimizer = keras.optimizers.SGD(recipe.learning_rate, momentum=0.9, nesterov=True)
    optimizer.build(model.trainable_variables)
    settings = (FixMatchSettings() if method_type is FixMatchMethod
                else PseudoLabelSettings())
    extra = dict(family=family) if method_type is FixMatchMethod else {}
    return method_type(strategy, model, optimizer, average, num_classes=C,
                       global_batch_size=16, weight_decay=1e-4, settings=settings,
                       total_steps=STEPS, source_optimizer=source, **extra, **kwargs)


@pytest.mark.parametrize("family", ["fixmatch_cifar", "imagenet"])
def test_a_step_is_nesterov_sgd_at_the_schedules_rate(family, initial_models):
    """Keras SGD(nesterov): m <- 0.9 m - lr_t g; w <- w + 0.9 m - lr_t g, with lr_t the base
    rate times the factor at t / S, for given gradients at t = 0, 300, 700 (float64 numpy).
    Each float32 step rounds a handful of products and sums of values no larger than the
    weights: within 16 ulps of the largest weight after three steps."""
    method = _with_spec(initial_models, FixMatchMethod, family=family)
    variables = method.model.trainable_variables
    rng = np.random.default_rng(0)
    weights = [v.numpy().astype(np.float64) for v in variables]
    momenta = [np.zeros_like(w) for w in weights]
    rate = method.recipe.learning_rate
    for t in (0, 300, 700):
        p = t / STEPS
        factor = (np.cos(7 * np.pi * p / 16) if family == "fixmatch_cifar"
                  else (p / (50 / 3000) if p < 50 / 3000 else 0.1 ** np.floor(p / (500 / 3000))))
        gradients = [rng.normal(size=w.shape).astype(np.float32) for w in weights]
        method.updates.assign(t)
        method.apply_gradients([tf.constant(g) for g in gradients])
        for i, g in enumerate(gradients):
            momenta[i] = 0.9 * momenta[i] - rate * factor * g
            weights[i] = weights[i] + 0.9 * momenta[i] - rate * factor * g
    for variable, want in zip(variables, weights):
        tolerance = 16 * np.spacing(np.float32(np.abs(want).max()))
        np.testing.assert_allclose(variable.numpy(), want, rtol=0, atol=tolerance,
                                   err_msg=variable.path)


def test_the_cifar_codes_weight_decay_is_over_the_kernels_only(initial_models):
    """libml: wd * sum(tf.nn.l2_loss(v) for v in model_vars('classify') if 'kernel' in v.name),
    wd 5e-4: no bias, no batch-norm weight (float64 sum of squares / 2)."""
    method = _with_spec(initial_models, PseudoLabelMethod)
    decayed = method.weight_decay_variables()
    names = [v.path for v in decayed]
    assert names and all(name.endswith("/kernel") for name in names)
    kernels = [v for v in method.model.trainable_variables if v.path.endswith("/kernel")]
    assert len(decayed) == len(kernels) < len(method.model.weight_decay_variables())
    want = 5e-4 * sum((v.numpy().astype(np.float64) ** 2).sum() / 2 for v in kernels)
    # A float32 sum of ~1e4 squares: its rounding is within n eps of the sum.
    np.testing.assert_allclose(float(method.weight_decay_penalty()), want, rtol=1e4 * 2 ** -24)
    protocol = _with_spec(initial_models, PseudoLabelMethod, source=False)
    assert protocol.weight_decay == 1e-4 and protocol.learning_rate_factor() is None
    assert ([v.path for v in protocol.weight_decay_variables()]
            == [v.path for v in protocol.model.weight_decay_variables()])


@pytest.mark.parametrize("family", ["fixmatch_cifar", "imagenet"])
def test_the_average_takes_the_recipes_weights(family, initial_models):
    """fixmatch_cifar (libml model_vars): trainable weights averaged, batch-norm statistics the
    model's; imagenet (imagenet/utils/ema.py over model.variables): every weight averaged."""
    method = _with_spec(initial_models, FixMatchMethod, family=family)
    method.ema_decay = 0.75  # a horizon of 4 steps (the rule: test_recipes.py)
    rng = np.random.default_rng(1)
    old = {v.path: v.numpy() for v in method.average.weights}
    for variable in method.model.weights:
        variable.assign(variable.numpy() + rng.normal(size=variable.shape).astype(np.float32))
    method.average_weights()
    alpha = np.float32(method.ema_decay)
    trainable = {v.path for v in method.model.trainable_weights}
    for average, weight in zip(method.average.weights, method.model.weights):
        averaged = weight.path in trainable or family == "imagenet"
        want = (alpha * old[average.path] + (np.float32(1) - alpha) * weight.numpy()
                if averaged else weight.numpy())
        np.testing.assert_array_equal(average.numpy(), want, err_msg=average.path)
    assert int(method.updates.numpy()) == 1


@pytest.mark.parametrize("name", ["llp", "supervised"])
def test_llp_and_supervised_keep_the_protocols_sgd_and_drops(tmp_path, name):
    config = TrainConfig.from_settings(run_dir=str(tmp_path), method=name,
                                       base_learning_rate=0.05, momentum=0.8,
                                       lr_drop_epochs=(3, 5), global_batch_size=64)
    spec = method_class(name).optimizer_spec(config.method_context())
    assert spec == OptimizerSpec(0.025, 0.8, nesterov=False, step_drops=True)
    rate = assembly._learning_rate(config, schedule.PlateauTracker(0))
    assert [rate(epoch) for epoch in (0, 3, 5)] == [
        schedule.learning_rate_at(epoch, 0.025, (3, 5), 0.1) for epoch in (0, 3, 5)]


def test_a_source_optimiser_keeps_its_rate_and_protocol_takes_the_drops(tmp_path):
    config = TrainConfig.from_settings(run_dir=str(tmp_path), method="mean_teacher",
                                       lr_drop_epochs=(3,))
    rate = assembly._learning_rate(config, schedule.PlateauTracker(0))
    assert rate(0) == rate(9) == 0.03
    protocol = config.replace(baseline_optimizer="protocol")
    assert method_class("mean_teacher").optimizer_spec(
        protocol.method_context()) == OptimizerSpec(0.03, 0.9)
    rate = assembly._learning_rate(protocol, schedule.PlateauTracker(0))
    assert rate(0) == 0.03 and rate(3) == pytest.approx(0.003, rel=1e-15)
