"""model.keras, the export's native Keras model: opened by `keras.saving.load_model` in safe
mode in a fresh process, equal to the SavedModel on the same images, and fine-tuned by
``fit`` with batch norm in training mode."""

import os
import subprocess
import sys

import numpy as np
import pytest

from llp_tf.after_training.export import keras_model
from tests.after_training.export.test_saved_model import _validation_images

FRESH_PROCESS_TIMEOUT_SECONDS = 180
# float32 outputs of the same network in two processes, the SavedModel preprocessing inside a
# map_fn and model.keras's input by the numpy reference (1.5e-6 apart per pixel, docs/onnx.md).
TOLERANCE = 1e-5
LEARNING_RATE = 0.1

# A new interpreter: the SavedModel's embed and classify on raw images; model.keras refused
# before llp_tf's classes are registered, then opened by load_model in safe mode and run on the
# same images preprocessed; one SGD step of fit on the logits, next to the same step computed by
# hand (gradient of the same loss from the same state, batch norm in training mode).
FRESH_PROCESS_SCRIPT = r"""
import os
import sys

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
import keras

export_dir, inputs_path, outputs_path, learning_rate = sys.argv[1:]
learning_rate = float(learning_rate)
inputs = np.load(inputs_path)
images, labels = inputs["images"], inputs["labels"]
outputs = {}
saved = tf.saved_model.load(export_dir)
for signature in ("embed", "classify"):
    for key, value in saved.signatures[signature](images=tf.constant(images)).items():
        if value.dtype == tf.float32:
            outputs[f"saved/{key}"] = value.numpy()

path = os.path.join(export_dir, "model.keras")
try:
    keras.saving.load_model(path)
    outputs["refused_before_import"] = np.array("")
except TypeError as error:
    outputs["refused_before_import"] = np.array(str(error)[:200])

import llp_tf  # noqa: E402,F401 -- registers the classes, Keras being imported
from llp_tf.after_training.export.onnx_model import preprocess_for_onnx  # noqa: E402

model = keras.saving.load_model(path)
outputs["class"] = np.array(type(model).__module__ + "." + type(model).__name__)
batch = preprocess_for_onnx(images, int(inputs["image_size"]))
for key, value in model(batch, training=False).items():
    outputs[f"keras/{key}"] = value.numpy()

first_norm = model.batch_norm_layers()[0]
stem = model.trunk.stem_conv(batch).numpy().astype(np.float64)
outputs["stem_mean"] = stem.mean(axis=(0, 1, 2))
outputs["stem_variance"] = stem.var(axis=(0, 1, 2))
outputs["momentum"] = np.array(first_norm.momentum)
names = [variable.path for variable in model.trainable_variables]
statistics = [variable for norm in model.batch_norm_layers()
              for variable in (norm.moving_mean, norm.moving_variance)]
outputs["trainable_names"] = np.array(names)
before = [variable.numpy() for variable in model.trainable_variables]
statistics_before = [variable.numpy() for variable in statistics]
loss_function = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
with tf.GradientTape() as tape:
    logits = model(batch, training=True, update_moving_statistics=False)["logits"]
    loss = loss_function(labels, logits)
gradients = tape.gradient(loss, model.trainable_variables)
outputs["gradient_missing"] = np.array([g is None for g in gradients])
expected = [b - learning_rate * (0 if g is None else g.numpy())
            for b, g in zip(before, gradients)]

model.compile(optimizer=keras.optimizers.SGD(learning_rate),
              loss={"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)})
model.fit(batch, {"logits": labels}, batch_size=len(batch), epochs=1, shuffle=False,
          verbose=0)
after = [variable.numpy() for variable in model.trainable_variables]
outputs["max_step_error"] = np.array([np.abs(a - e).max() for a, e in zip(after, expected)])
outputs["max_step"] = np.array([np.abs(a - b).max() for a, b in zip(after, before)])
outputs["statistics_moved"] = np.array(
    [np.abs(variable.numpy() - b).max() for variable, b in zip(statistics, statistics_before)])
outputs["first_moving_mean"] = first_norm.moving_mean.numpy()
outputs["first_moving_variance"] = first_norm.moving_variance.numpy()
outputs["first_moving_mean_before"] = statistics_before[0]
outputs["first_moving_variance_before"] = statistics_before[1]
np.savez(outputs_path, **outputs)
"""


@pytest.fixture(scope="module")
def fresh(tiny_llp_export, run, tmp_path_factory):
    """The fresh process's outputs on the stripes validation images."""
    export_dir, _ = tiny_llp_export
    images, labels = _validation_images(run.config.data.dataset)
    folder = tmp_path_factory.mktemp("keras_fresh")
    np.savez(folder / "inputs.npz", images=images, labels=labels,
             image_size=run.config.data.image_size)
    (folder / "fresh.py").write_text(FRESH_PROCESS_SCRIPT)
    result = subprocess.run(
        [sys.executable, str(folder / "fresh.py"), export_dir, str(folder / "inputs.npz"),
         str(folder / "outputs.npz"), str(LEARNING_RATE)], capture_output=True, text=True,
        cwd=str(folder), timeout=FRESH_PROCESS_TIMEOUT_SECONDS)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(np.load(folder / "outputs.npz"))


def test_export_info_names_the_keras_file_and_how_to_load_it(tiny_llp_export):
    _, info = tiny_llp_export
    assert info["keras"]["file"] == keras_model.KERAS_FILE
    assert info["keras"]["load"].startswith("import llp_tf;")
    assert info["keras"]["outputs"]["logits"]["shape"] == "[B, 4]"


def test_load_model_needs_the_registering_import_and_then_opens_in_safe_mode(fresh):
    assert "Could not locate class 'EmbeddingClassifier'" in str(fresh["refused_before_import"])
    assert str(fresh["class"]) == "llp_tf.models.embedding_classifier.EmbeddingClassifier"


LLP_TF_FIRST = """
import sys
import llp_tf
assert "keras" not in sys.modules and "tensorflow" not in sys.modules, "imported eagerly"
import keras
print(type(keras.saving.load_model(sys.argv[1])).__name__)
"""


def test_importing_llp_tf_before_keras_registers_the_classes_once_keras_is_imported(
        tiny_llp_export):
    """``import llp_tf`` imports neither Keras nor TensorFlow; a later ``import keras`` is
    enough for load_model."""
    export_dir, _ = tiny_llp_export
    result = subprocess.run(
        [sys.executable, "-c", LLP_TF_FIRST, f"{export_dir}/{keras_model.KERAS_FILE}"],
        capture_output=True, text=True, timeout=FRESH_PROCESS_TIMEOUT_SECONDS,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == "EmbeddingClassifier"


def test_outputs_equal_the_saved_models_on_the_same_images(fresh):
    for key in ("embedding", "features"):
        np.testing.assert_allclose(fresh[f"keras/{key}"], fresh[f"saved/{key}"],
                                   rtol=TOLERANCE, atol=TOLERANCE, err_msg=key)
    logits = fresh["keras/logits"].astype(np.float64)
    exponentials = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(exponentials / exponentials.sum(axis=1, keepdims=True),
                               fresh["saved/probabilities"], rtol=0, atol=TOLERANCE)


def test_fit_takes_the_sgd_step_of_the_logits_loss_on_every_weight_it_reaches(fresh):
    names = [str(name) for name in fresh["trainable_names"]]
    missing = fresh["gradient_missing"]
    # The logits loss reaches the trunk (batch-norm gamma and beta included) and the category
    # head, not the embedding head.
    assert [name for name, gone in zip(names, missing) if gone] == \
        [name for name in names if "embedding_head" in name]
    assert any("gamma" in name for name, gone in zip(names, missing) if not gone)
    assert np.all(fresh["max_step"][~missing] > 0)
    assert np.all(fresh["max_step"][missing] == 0)
    # fit's step is SGD on the gradient taken in training mode from the same state: one step,
    # float32 gradients of two code paths.
    np.testing.assert_array_less(fresh["max_step_error"], 1e-6)


def test_fit_updates_the_batch_norm_moving_statistics(fresh):
    assert np.all(fresh["statistics_moved"] > 0)
    # The first batch norm normalises the stem's output: its moving statistics take one
    # moving-average step towards that output's batch moments (biased variance, as Keras's).
    momentum = float(fresh["momentum"])
    np.testing.assert_allclose(
        fresh["first_moving_mean"],
        momentum * fresh["first_moving_mean_before"] + (1 - momentum) * fresh["stem_mean"],
        rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        fresh["first_moving_variance"],
        momentum * fresh["first_moving_variance_before"]
        + (1 - momentum) * fresh["stem_variance"], rtol=1e-5, atol=1e-6)
