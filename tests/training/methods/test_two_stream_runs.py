"""Pseudo-label and FixMatch runs end to end: killed with SIGKILL and resumed,
they end as an uninterrupted run, bit for bit; tools/export.py writes a classify
signature that works; FixMatch's device-side views take the host-side step."""

import io

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.training import run_training
from llp_tf.training.run_directory import RunDirectory
from tests.runs import DriverProcess, assert_same_state, checkpoint_state, tiny_config
from tests.cli.tool_main import load_tool, run_main
from tests.training.run_steps import ONE_STEP_EPOCHS, assert_same_fixmatch_step, \
    recorded_logit_scale, reference_after_a_copy

METHODS = ("pseudo_label", "fixmatch")
# 160 stripes, 32 a step: 5 steps an epoch; checkpoints at steps 3, 5, 6, 9, 10; loops of
# steps start at 0, 2, 3, 5, 6, 8, 9.
SETTINGS = dict(warmup_epochs=0, epochs=2, eval_every=1, checkpoint_every=3)


def _config(tmp_path, stripes, method):
    config = tiny_config(tmp_path, stripes, method=method, **SETTINGS)
    path = str(tmp_path / "config-to-train.json")
    with open(path, "w") as f:
        f.write(config.to_json())
    return config, path


# make test trains and exports the pseudo-label run; FixMatch's (the same exported item, its
# average model, read by the same export code) runs in make test-all.
@pytest.fixture(scope="module",
                params=[pytest.param(m, marks=[pytest.mark.slow] if m == "fixmatch" else [])
                        for m in METHODS])
def uninterrupted(request, tmp_path_factory, stripes):
    config = tiny_config(tmp_path_factory.mktemp(request.param), stripes,
                         method=request.param, **SETTINGS)
    run_training(config, stream=io.StringIO())
    return config


@pytest.mark.slow
def test_killed_twice_ends_as_the_uninterrupted_run(tmp_path, stripes, uninterrupted):
    config, config_path = _config(tmp_path, stripes, uninterrupted.method.name)
    run = RunDirectory(config.run_dir)
    for point, last_checkpoint in (("after_save:3", 3),    # epoch 1, right after a checkpoint
                                   ("step:8", 6)):         # epoch 2, between checkpoints
        driver = DriverProcess(config_path, point)
        driver.wait_until_blocked()
        driver.kill()
        assert run.latest_checkpoint().endswith(f"ckpt-{last_checkpoint}"), point
    run_training(config, stream=io.StringIO())
    assert_same_state(config.run_dir, uninterrupted.run_dir, bank=False)
    rows, reference = run.read_metrics(), RunDirectory(uninterrupted.run_dir).read_metrics()
    assert [row["epoch"] for row in rows] == [1, 2]
    for row, wanted in zip(rows, reference):
        for name in ("val_top1", "loss", "labelled", "unlabelled", "mask"):
            assert row[name] == wanted[name], name


def test_the_run_reports_both_evaluated_models_and_keeps_both(uninterrupted):
    """The average model's metrics are val_*, the trained weights' val_trained_* (a second
    evaluated model: its metrics but the example count); the checkpoint keeps both models (the
    same here: the source's EMA over a run of 10 steps is the weights themselves)."""
    rows = RunDirectory(uninterrupted.run_dir).read_metrics()
    assert [row["epoch"] for row in rows] == [1, 2]
    for name in ("val_top1", "val_top5", "val_categorisation", "val_trained_top1",
                 "val_trained_top5", "val_trained_categorisation"):
        assert all(np.isfinite(row[name]) for row in rows), name
    assert "val_examples" in rows[-1] and "val_trained_examples" not in rows[-1]
    assert not any(name.startswith("val_nn") for row in rows for name in row)  # no bank
    state = checkpoint_state(uninterrupted.run_dir)
    for model in ("average", "model"):
        assert f"{model}/category_head/_kernel/.ATTRIBUTES/VARIABLE_VALUE" in state, model


def test_the_export_tool_writes_a_classify_signature_that_works(tmp_path, uninterrupted):
    export_dir = str(tmp_path / "export")
    code, stdout, stderr = run_main(load_tool("export.py"), f"--run_dir={uninterrupted.run_dir}",
                                    f"--output_dir={export_dir}")
    assert code == 0, stderr
    classify = tf.saved_model.load(export_dir).signatures["classify"]
    images = np.random.default_rng(0).integers(0, 256, (3, 16, 16, 3)).astype(np.uint8)
    result = classify(images=tf.constant(images))
    probabilities = result["probabilities"].numpy()
    assert probabilities.shape == (3, 4)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(result["top5_classes"].numpy()[:, 0],
                                  probabilities.argmax(axis=1))


@pytest.mark.slow
def test_device_side_views_over_two_replicas_take_the_host_sides_step(tmp_path, stripes,
                                                                    monkeypatch):
    """FixMatch's weak and strong views, augmented in each replica's step
    (--augment_on=device), over two replicas: the second step, from the host-side
    run's first checkpoint, per term (`run_steps.assert_same_fixmatch_step`). The
    images agree to 1e-6 (tests/data/augmentation/test_views.py), a relative input
    error of 1e-6 over the normalised images' size (at least 0.1: their root mean
    square is about 1)."""
    logits = recorded_logit_scale(monkeypatch, "pseudo_label_terms", [0, 2, 3])
    settings = dict(method="fixmatch", warmup_epochs=0, cpu_replicas=2,
                    fixmatch_threshold=0.3)
    other = tmp_path / "device" / "run"
    host = reference_after_a_copy(tmp_path / "host", stripes, other, augment_on="host",
                                  **settings)
    run_training(tiny_config(tmp_path / "device", stripes, augment_on="device",
                             **dict(ONE_STEP_EPOCHS, **settings)), stream=io.StringIO())
    assert_same_fixmatch_step(host, other, logits, input_rtol=1e-6 / 0.1)
    assert RunDirectory(other).read_metrics()[1]["mask"] > 0
