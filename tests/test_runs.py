"""docs/python-api.md's examples run as written (the demo regime made tiny, on the digits
scikit-learn ships): train, load, embed, classify; and what they return is the run's
checkpoint and the model's outputs on the evaluation crop."""

import contextlib
import io
import os
import re

import numpy as np
import pytest
import tensorflow as tf

import llp_tf
from llp_tf.data.augmentation import eval_transform
from llp_tf.errors import ConfigError
from tests.cli.tool_main import ROOT
from tests.runs import checkpoint_state

PAGE = os.path.join(ROOT, "docs", "python-api.md")


def python_blocks(text):
    """The code of the page's ```python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The namespace after running the page's blocks in order in a fresh folder, with
    "printed" (their stdout) and "folder"."""
    with open(PAGE) as f:
        blocks = python_blocks(f.read())
    assert len(blocks) >= 4
    folder = tmp_path_factory.mktemp("python_api")
    namespace, printed, cwd = {"__name__": "python_api_page"}, io.StringIO(), os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(printed):
            for block in blocks:
                exec(compile(block, PAGE, "exec"), namespace)  # noqa: S102
    finally:
        os.chdir(cwd)
    namespace.update(printed=printed.getvalue(), folder=folder)
    return namespace


def test_the_page_trains_the_regime_and_loads_the_run(page):
    run = page["run"]
    assert "the run in runs/notebook has trained 2 of 2 epochs" in page["printed"]
    assert run.run_dir == "runs/notebook" and isinstance(run, llp_tf.Run)
    assert run.config.data.dataset == "digits" and run.config.optimization.epochs == 2
    assert run.config.optimization.base_learning_rate == 0.03  # the demo regime's
    assert [row["epoch"] for row in run.metrics] == [1, 2]
    assert run.step == run.metrics[-1]["step"] and run.checkpoint.endswith(f"ckpt-{run.step}")
    assert run.class_names == [str(c) for c in range(10)]
    saved = checkpoint_state(os.path.join(page["folder"], "runs", "notebook"))
    for name in ("embeddings", "labels", "confidence", "is_labelled"):
        np.testing.assert_array_equal(run.bank[name],
                                      saved[f"bank/{name}/.ATTRIBUTES/VARIABLE_VALUE"])
    assert run.bank["examples"].size == run.bank["embeddings"].shape[0] > 0


def _model_outputs(run, image):
    """The model's eager outputs on ``image`` uint8 [H, W, 1] after the evaluation crop."""
    rgb = tf.tile(tf.constant(image), [1, 1, 3])
    crop = eval_transform.eval_preprocess(rgb, run.config.data.image_size)
    return run.model(crop[None], training=False)


def test_embed_and_classify_are_the_models_outputs_on_the_evaluation_crop(page, tmp_path):
    run, images = page["run"], page["images"]
    assert page["embeddings"].shape == (8, 16) and page["probabilities"].shape == (8, 10)
    for i, image in enumerate(images):
        outputs = _model_outputs(run, image)
        # The same float32 operations, in a tf.function and eagerly.
        np.testing.assert_allclose(page["embeddings"][i], outputs["embedding"][0], atol=1e-5)
        np.testing.assert_allclose(page["probabilities"][i],
                                   tf.nn.softmax(outputs["logits"][0]), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(page["embeddings"], axis=1), 1, atol=1e-5)
    # A file is decoded as the predict tool decodes it: grayscale repeated.
    path = str(tmp_path / "digit.png")
    tf.io.write_file(path, tf.io.encode_png(images[3]))
    np.testing.assert_allclose(run.classify([path]), page["probabilities"][3:4], atol=1e-6)
    np.testing.assert_allclose(run.embed([path]), page["embeddings"][3:4], atol=1e-6)
    similarity = page["embeddings"] @ run.bank["embeddings"].T
    assert page["nearest_examples"].tolist() == \
        run.bank["examples"][np.argmax(similarity, axis=1)].tolist()


def test_a_resume_trains_nothing_more_and_bad_settings_are_config_errors(page):
    cwd = os.getcwd()
    os.chdir(page["folder"])
    try:
        again = llp_tf.train_regime("demo", quiet=True, **page["run"].config.settings())
    finally:
        os.chdir(cwd)
    assert again.step == page["run"].step
    with pytest.raises(ConfigError, match="Unknown regime 'nope'"):
        llp_tf.train_regime("nope")
    with pytest.raises(ConfigError, match=r"Unknown training setting\(s\): epoch\."):
        llp_tf.train_regime("demo", epoch=2)
    with pytest.raises(ValueError, match="at least one image"):
        page["run"].classify([])
