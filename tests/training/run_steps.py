"""Two training runs compared one step apart from the same state, through their
checkpoints and metrics rows: the reference trains its first epoch (one
step: all 160 stripes a step), its run directory is copied for the other,
and both train the second epoch's step from that checkpoint. The step's
terms are compared to `tests.numerics`' bounds (`tests.training.llp_steps`
for LLP's, FixMatch's as tests/training/methods/test_fixmatch.py's)."""

import io
import shutil

import numpy as np
import tensorflow as tf

from llp_tf.core import losses
from llp_tf.training import run_training
from llp_tf.training.run_directory import RunDirectory
from tests import numerics
from tests.runs import PATTERNS, assert_same_step_states, checkpoint_state, short_name, \
    tiny_config
from tests.training.llp_steps import LLPSizes, assert_same_density, assert_same_writes, \
    metric_bounds

#: Every stripe in each step: an epoch is one step, checkpointed at its end.
ONE_STEP_EPOCHS = dict(global_batch_size=160, epochs=2, eval_every=1)


def recorded_logit_scale(monkeypatch, function, logits_arguments):
    """A list that gets max |logit| of each call of ``losses.<function>`` this
    process makes from now on (the calls' positional ``logits_arguments``): the
    size of the logits of the steps a run here takes."""
    seen = [0.0]
    real = getattr(losses, function)

    def record(*logits):
        seen.append(max(float(np.max(np.abs(z))) for z in logits))
        return np.float32(0)

    def recording(*args, **kwargs):
        done = tf.numpy_function(record, [args[i] for i in logits_arguments], tf.float32,
                                 stateful=True)
        with tf.control_dependencies([done]):
            return real(*args, **kwargs)

    monkeypatch.setattr(losses, function, recording)
    return seen


def reference_after_a_copy(tmp_path, stripes, other_dir, **settings):
    """Trains the first epoch of ``settings`` (with `ONE_STEP_EPOCHS`) here in
    ``tmp_path``, copies the run directory to ``other_dir``, then trains the
    second epoch; returns the reference's config."""
    settings = dict(ONE_STEP_EPOCHS, **settings)
    reference = tiny_config(tmp_path, stripes, **dict(settings, epochs=1))
    run_training(reference, stream=io.StringIO())
    shutil.copytree(reference.run_dir, other_dir)
    reference = reference.replace(epochs=settings["epochs"])
    run_training(reference, stream=io.StringIO())
    return reference


def _decayed_weights(state):
    return sum(value.size for name, value in state.items()
               if short_name(name).startswith("model/")
               and short_name(name).endswith(("kernel", "bias")))


def _states_and_rows(reference, other_dir):
    """(start, want, got checkpoint states; want, got rows of the last epoch), the epochs
    before it copied (one step each)."""
    rows = [RunDirectory(d).read_metrics() for d in (reference.run_dir, other_dir)]
    epochs = list(range(1, reference.optimization.epochs + 1))
    assert [[row["epoch"] for row in r] for r in rows] == [epochs, epochs]
    assert rows[1][:-1] == rows[0][:-1]  # the copied epochs
    start = checkpoint_state(reference.run_dir, step=epochs[-2])
    want, got = checkpoint_state(reference.run_dir), checkpoint_state(other_dir)
    # A prediction flips only at a near tie of its logits: one flip at most.
    assert abs(rows[1][-1]["val_top1"] - rows[0][-1]["val_top1"]) <= \
        1 / rows[0][-1]["val_examples"]
    return start, want, got, rows[0][-1], rows[1][-1]


def _epoch_totals_checks(state, bounds, val_examples):
    """Checks of a step's checkpointed epoch sums and weights (one step: its metrics,
    those of ``bounds`` that ``state`` holds) and of the plateau's best."""
    def within(name):
        def check(start, want, got):
            assert abs(float(got) - float(want)) <= bounds[name], name
        return check
    # A subset mean's weights (the share of rows in its subset) within its own bound.
    checks = {f"epoch_totals/{kind}/{name}": within(name) for name in bounds
              for kind in ("sums", "weights")
              if f"epoch_totals/{kind}/{name}/.ATTRIBUTES/VARIABLE_VALUE" in state}

    def plateau(start, want, got):
        # A top-1 fraction, or -inf before the first tracked evaluation.
        assert got == want or abs(float(got) - float(want)) <= 1 / val_examples, "plateau best"
    checks["plateau/best"] = plateau
    return checks


def assert_same_llp_step(reference, other_dir, logits, input_rtol=0.0):
    """The first LLP step (after the density refresh) of two LLP runs from the
    warm-up's checkpoint, per term: the metrics, the weights' and optimizer's
    moves, the bank's writes and densities. ``logits``: the size of the step's
    logits (`recorded_logit_scale`); ``input_rtol``: of the runs' images."""
    start, want, got, want_row, got_row = _states_and_rows(reference, other_dir)
    bank = [{name: state[f"bank/{name}/.ATTRIBUTES/VARIABLE_VALUE"]
             for name in ("embeddings", "labels", "confidence", "density")}
            for state in (start, want, got)]
    settings = reference.method_settings
    sizes = LLPSizes(len(bank[0]["labels"]), reference.model.embedding_dim, len(PATTERNS),
                     settings.temperature, settings.bank_momentum, settings.k, settings.t,
                     _decayed_weights(start),
                     start["bank/labelled_index/.ATTRIBUTES/VARIABLE_VALUE"])
    batch = reference.optimization.global_batch_size
    assert batch == sizes.rows
    sums = numerics.tiny_resnet_sums(batch, reference.data.image_size)
    rtol = numerics.network_rtol(sums) + input_rtol
    offset_error = assert_same_density(sizes, bank[0]["embeddings"], bank[1]["density"],
                                       bank[2]["density"])
    assert_same_writes(sizes, dict(bank[0], density=bank[1]["density"]), bank[1],
                       dict(bank[2], density=bank[1]["density"]), np.arange(batch), rtol,
                       offset_error=offset_error)
    bounds = metric_bounds(sizes, want_row, bank[0], rtol, max(logits), batch)
    shown = {name: bound for name, bound in bounds.items() if name in want_row}
    numerics.assert_same_metrics({n: want_row[n] for n in shown}, {n: got_row[n] for n in shown},
                                 shown)
    assert_same_step_states(start, want, got, numerics.step_rtol(sums) + 2 * input_rtol,
                            _epoch_totals_checks(start, bounds, want_row["val_examples"]),
                            compared={f"bank/{name}" for name in bank[0]})


def assert_same_fixmatch_step(reference, other_dir, logits, input_rtol=0.0):
    """The second step of two FixMatch runs from the first's checkpoint, per term
    (as `assert_same_llp_step`; its cross-entropies and mask as
    tests/training/methods/test_fixmatch.py's)."""
    start, want, got, want_row, got_row = _states_and_rows(reference, other_dir)
    method = reference.method_settings.resolved(reference.method.baseline_preset)
    batch = reference.optimization.global_batch_size
    labelled = batch // (1 + method["unlabelled_ratio"])
    sums = numerics.tiny_resnet_sums(labelled + 2 * (batch - labelled), reference.data.image_size)
    rtol = numerics.network_rtol(sums) + input_rtol
    softmax = numerics.softmax_term_bound(rtol, max(logits), len(PATTERNS))
    bounds = {"labelled": numerics.metric_bound(want_row["labelled"], labelled, softmax),
              "unlabelled": numerics.metric_bound(want_row["unlabelled"], batch - labelled,
                                                  softmax),
              "mask": numerics.metric_bound(want_row["mask"], batch - labelled),
              "weight_decay": numerics.metric_bound(want_row["weight_decay"],
                                                    _decayed_weights(start))}
    bounds["loss"] = (bounds["labelled"] + method["unlabelled_weight"] * bounds["unlabelled"]
                      + bounds["weight_decay"]
                      + numerics.reordered_sum_bound(3, want_row["loss"]))
    numerics.assert_same_metrics({n: want_row[n] for n in bounds},
                                 {n: got_row[n] for n in bounds}, bounds)
    assert_same_step_states(start, want, got, numerics.step_rtol(sums) + 2 * input_rtol,
                            _epoch_totals_checks(start, bounds, want_row["val_examples"]))
