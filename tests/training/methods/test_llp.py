"""llp_tf/training/methods/llp.py: the settings that shape propagation, as `from_context` builds
the method (its steps: tests/training/test_methods.py)."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.training.methods import TrainingSplit
from llp_tf.training.methods.llp import LLPMethod, LLPSettings, few_labels_warning
from tests import reference
from tests.runs import tiny_config
from tests.training.methods.two_streams import C, tiny_model

USED, EMBEDDING = 60, 16


@pytest.fixture(scope="module")
def model_and_optimizer():
    """A `tiny_model` and its optimizer, built once for the module (the methods built on them
    read them; the density refresh reads the bank only)."""
    return tiny_model(tf.distribute.get_strategy())


def _method(model_and_optimizer, tmp_path, labelled_classes, **settings):
    config = tiny_config(tmp_path, "digits", method="llp", epochs=2, warmup_epochs=1,
                         embedding_dim=EMBEDDING, width=0.125, architecture="resnet10",
                         small_inputs=True, image_size=8, **settings)
    strategy = tf.distribute.get_strategy()
    model, optimizer = model_and_optimizer
    labelled = np.arange(len(labelled_classes)) * 3
    split = TrainingSplit(labelled, np.arange(USED), np.asarray(labelled_classes, np.int64))
    return LLPMethod.from_context(config.method_context(), strategy, model, optimizer, C, split)


@pytest.mark.parametrize("normalisation", ["release", "paper"])
def test_the_density_normalisation_setting_reaches_the_refresh(tmp_path, normalisation,
                                                              model_and_optimizer):
    """T = 5 of 60 rows at tau = 0.07 (the bank's random initial rows): the paper's rho is
    the release's over Z, a sum over all 60 rows (log rho within 4e-5 of float64, as in
    tests/core/test_bank_contract.py)."""
    method = _method(model_and_optimizer, tmp_path, np.arange(12) % C, t=5,
                     density_normalisation=normalisation)
    method.refresh_density()
    bank = method.bank
    rows = bank.embeddings.numpy()
    want = reference.local_density(rows[bank.labelled_index.numpy()], rows, 5, 0.07,
                                   normalisation)
    np.testing.assert_allclose(np.log(bank.density.numpy()), np.log(want), atol=4e-5, rtol=0)
    other = "paper" if normalisation == "release" else "release"
    unwanted = reference.local_density(rows[bank.labelled_index.numpy()], rows, 5, 0.07, other)
    assert np.all(np.abs(np.log(bank.density.numpy()) - np.log(unwanted)) > 1.0)


def test_the_default_normalisation_is_the_releases():
    assert LLPSettings().density_normalisation == "release"


def test_k_above_the_smallest_classs_labels_is_a_warning(tmp_path, capsys, model_and_optimizer):
    # Class 2 has 2 labelled images, the others 4: K = 3 leaves 1 vote to other classes.
    classes = [0] * 4 + [1] * 4 + [2] * 2
    settings = dataclasses.replace(LLPSettings(), k=3)
    assert few_labels_warning(settings, np.array(classes), C) == (
        "warning: --k=3 exceeds the 2 labelled images of the smallest class (class 2; 1 of 3 "
        "classes have fewer than 3): at least 1 of the 3 votes for an image of that class "
        "come from other classes. The paper's regimes keep K at or below the labelled images "
        "a class on average (ImageNet 1%: 12.8); give --k=2 or less, or more labels "
        "(--label_percent).")
    assert few_labels_warning(dataclasses.replace(settings, k=2), np.array(classes), C) is None
    # The category head does not vote.
    assert few_labels_warning(dataclasses.replace(settings, propagation="classifier"),
                              np.array(classes), C) is None
    # The method says so when it is built, on stderr, and builds.
    _method(model_and_optimizer, tmp_path, classes, k=3)
    assert capsys.readouterr().err.startswith("warning: --k=3 exceeds the 2 labelled images")
    _method(model_and_optimizer, tmp_path, classes, k=2)
    assert capsys.readouterr().err == ""


def test_a_warm_start_loads_a_runs_model_and_bank_rows(tiny_llp_training, tmp_path):
    """`initialise` of a method warm-started from a run directory (the shared LLP run): its
    newest checkpoint's model weights and bank rows bit for bit, the bank's labels as they
    were, LLP from epoch --warmup_epochs; a run of another used set and a folder without a
    checkpoint are refused. (A whole warm-started run: test_assembly.py's test_warm_start.)"""
    import keras

    from llp_tf.data.sources.registry import load_source
    from llp_tf.data.splits import regime
    from llp_tf.errors import ConfigError
    from llp_tf.models.factory import build_model_from_config
    from llp_tf.training.run_directory import RunDirectory
    from tests.runs import checkpoint_state

    trained, _ = tiny_llp_training
    source = load_source(trained.data.dataset, trained.data.data_dir)
    labels, classes = source.train_labels(), len(source.info.class_names)
    labelled, used = regime.load_splits(RunDirectory(trained.run_dir).split_path, labels)

    def warm_started(warm_start, used_index=used):
        config = trained.replace(run_dir=str(tmp_path / "llp"), warm_start=warm_start,
                                 warmup_epochs=2)
        model = build_model_from_config(config.model, classes, config.data.image_size)
        optimizer = keras.optimizers.SGD(0.1)
        split = TrainingSplit(labelled, used_index, labels[labelled])
        return LLPMethod.from_context(config.method_context(), tf.distribute.get_strategy(),
                                      model, optimizer, classes, split)

    method = warm_started(trained.run_dir)
    labels_before = method.bank.labels.numpy()
    assert method.initialise(5) == (10, f"Warm start from {trained.run_dir}: LLP from epoch 2.")
    path = RunDirectory(trained.run_dir).latest_checkpoint()
    saved = build_model_from_config(trained.model, classes, trained.data.image_size)
    tf.train.Checkpoint(model=saved).restore(path).expect_partial()
    for got, want in zip(method.model.weights, saved.weights, strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=want.path)
    state = checkpoint_state(trained.run_dir)
    np.testing.assert_array_equal(method.bank.embeddings.numpy(),
                                  state["bank/embeddings/.ATTRIBUTES/VARIABLE_VALUE"])
    np.testing.assert_array_equal(method.bank.labels.numpy(), labels_before)
    assert not np.array_equal(labels_before, state["bank/labels/.ATTRIBUTES/VARIABLE_VALUE"])

    unlabelled = np.setdiff1d(used, labelled)
    with pytest.raises(ConfigError, match="used another set of training examples"):
        warm_started(trained.run_dir, np.setdiff1d(used, unlabelled[:1])).initialise(5)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no checkpoint"):
        warm_started(str(tmp_path / "empty")).initialise(5)
