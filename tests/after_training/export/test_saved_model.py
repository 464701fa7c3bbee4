import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.after_training.export import saved_model
from llp_tf.after_training.export.inference_module import InferenceModule, bank_classes
from llp_tf.data.augmentation import eval_transform
from llp_tf.errors import ConfigError

FRESH_PROCESS_TIMEOUT_SECONDS = 180
# float32 outputs of the same graph ops in two processes; the preprocessing
# runs eagerly per image here and inside a map_fn there.
TOLERANCE = 1e-5

# Runs in a new interpreter that never imports llp_tf: loads the SavedModel,
# runs every signature on the saved image sets, and fine-tunes one step of a
# Keras TFSMLayer around ``embed``.
FRESH_PROCESS_SCRIPT = r"""
import os
import sys

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
import keras

model_dir, inputs_path, outputs_path = sys.argv[1:]


def array(tensor):
    value = tensor.numpy()
    # Strings come out as object arrays, which np.load refuses to unpickle.
    return value.astype(bytes) if value.dtype == object else value


loaded = tf.saved_model.load(model_dir)
inputs = np.load(inputs_path)
outputs = {"signatures": np.array(sorted(loaded.signatures.keys())),
           "class_names": array(loaded.class_names)}
for set_name in inputs.files:
    images = tf.constant(inputs[set_name])
    for signature in ("embed", "classify", "knn"):
        result = loaded.signatures[signature](images=images)
        for key, value in result.items():
            outputs[f"{set_name}/{signature}/{key}"] = array(value)
    outputs[f"{set_name}/attribute_embed"] = loaded.embed(images)["embedding"].numpy()

layer = keras.layers.TFSMLayer(model_dir, call_endpoint="embed", trainable=True)
images = tf.constant(inputs["stripes"])
outputs["tfsm_trainable"] = np.array(len(layer.trainable_weights))
outputs["tfsm_non_trainable"] = np.array(len(layer.non_trainable_weights))
outputs["tfsm_embedding"] = layer(images)["embedding"].numpy()
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(layer(images)["embedding"][:, 0])
gradients = tape.gradient(loss, layer.trainable_weights)
outputs["tfsm_with_gradient"] = np.array(sum(g is not None for g in gradients))
for weight, gradient in zip(layer.trainable_weights, gradients):
    if gradient is not None:
        weight.assign_sub(0.1 * gradient)
outputs["tfsm_embedding_after_step"] = layer(images)["embedding"].numpy()
outputs["llp_tf_imported"] = np.array("llp_tf" in sys.modules)
np.savez(outputs_path, **outputs)
"""


def _validation_images(dataset, per_class=2):
    """uint8 [4 * per_class, 16, 16, 3] stripe images and their class numbers."""
    root = os.path.join(dataset.split(":", 1)[1], "validation")
    images, labels = [], []
    for label, kind in enumerate(sorted(os.listdir(root))):
        for name in sorted(os.listdir(os.path.join(root, kind)))[:per_class]:
            png = tf.io.read_file(os.path.join(root, kind, name))
            images.append(tf.io.decode_png(png, channels=3).numpy())
            labels.append(label)
    return np.stack(images), np.array(labels)


@pytest.fixture(scope="module")
def image_sets(run):
    """Three batches: native 16 px RGB, 23 x 37 tinted RGB, 20 x 20 grayscale."""
    stripes, _ = _validation_images(run.config.data.dataset)
    tint = np.array([1.0, 0.6, 0.3])
    resized = tf.image.resize(stripes[:5], [23, 37]).numpy() * tint
    gray = tf.image.resize(stripes[3:7, :, :, :1], [20, 20]).numpy()
    return {"stripes": stripes,
            "resized": np.clip(np.round(resized), 0, 255).astype(np.uint8),
            "gray": np.clip(np.round(gray), 0, 255).astype(np.uint8)}


@pytest.fixture(scope="module")
def fresh_outputs(tiny_llp_export, image_sets, tmp_path_factory):
    """Every signature's outputs on `image_sets`, computed in a new process."""
    model_dir, _ = tiny_llp_export
    folder = tmp_path_factory.mktemp("fresh")
    np.savez(folder / "inputs.npz", **image_sets)
    (folder / "fresh.py").write_text(FRESH_PROCESS_SCRIPT)
    result = subprocess.run(
        [sys.executable, str(folder / "fresh.py"), model_dir, str(folder / "inputs.npz"),
         str(folder / "outputs.npz")], capture_output=True, text=True, cwd=str(folder),
        timeout=FRESH_PROCESS_TIMEOUT_SECONDS)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(np.load(folder / "outputs.npz"))


def _reference(run, images):
    """The trained model's outputs, float64: the eval transform image by image."""
    if images.shape[-1] == 1:
        images = np.repeat(images, 3, axis=-1)
    batch = tf.stack([eval_transform.eval_preprocess(tf.constant(image), run.config.data.image_size)
                      for image in images])
    outputs = run.model(batch, training=False)
    reference = {name: value.numpy().astype(np.float64) for name, value in outputs.items()}
    logits = reference["logits"]
    exponentials = np.exp(logits - logits.max(axis=1, keepdims=True))
    reference["probabilities"] = exponentials / exponentials.sum(axis=1, keepdims=True)
    return reference


def _knn_vote(embedding, bank, classes, k, temperature, num_classes):
    """The weighted k-NN vote of eq. 5-6 among the k nearest rows that have a class,
    in float64 numpy: (nearest rows [B, k], class probabilities [B, C])."""
    similarity = embedding @ bank.T
    nearest = np.argsort(-similarity, axis=1, kind="stable")[:, :k]
    probabilities = np.zeros((len(embedding), num_classes))
    for query, rows in enumerate(nearest):
        for row in rows:
            if classes[row] >= 0:
                probabilities[query, classes[row]] += np.exp(similarity[query, row] / temperature)
    totals = probabilities.sum(axis=1, keepdims=True)
    return nearest, np.divide(probabilities, totals, out=np.zeros_like(probabilities),
                              where=totals > 0)


def test_a_fresh_process_loads_the_export_without_llp_tf(class_names, fresh_outputs):
    assert not fresh_outputs["llp_tf_imported"]
    assert fresh_outputs["signatures"].tolist() == ["classify", "embed", "knn",
                                                     "serving_default"]
    assert [name.decode() for name in fresh_outputs["class_names"]] == list(class_names)


@pytest.mark.parametrize("set_name", ["stripes", "resized", "gray"])
def test_embed_and_classify_give_the_trained_models_outputs(
        run, class_names, image_sets, fresh_outputs, set_name):
    reference = _reference(run, image_sets[set_name])
    for key in ("embedding", "features"):
        np.testing.assert_allclose(fresh_outputs[f"{set_name}/embed/{key}"], reference[key],
                                   rtol=TOLERANCE, atol=TOLERANCE, err_msg=key)
    np.testing.assert_allclose(fresh_outputs[f"{set_name}/attribute_embed"],
                               reference["embedding"], atol=TOLERANCE)
    np.testing.assert_allclose(fresh_outputs[f"{set_name}/classify/probabilities"],
                               reference["probabilities"], atol=TOLERANCE)
    top_classes = fresh_outputs[f"{set_name}/classify/top5_classes"]
    assert top_classes.shape == (len(image_sets[set_name]), 4)  # min(5, C = 4)
    # Best first: the reference probabilities of the returned classes are the
    # sorted reference probabilities.
    top_reference = np.take_along_axis(reference["probabilities"], top_classes, axis=1)
    np.testing.assert_allclose(top_reference, -np.sort(-reference["probabilities"], axis=1),
                               atol=TOLERANCE)
    np.testing.assert_allclose(fresh_outputs[f"{set_name}/classify/top5_probabilities"],
                               top_reference, atol=TOLERANCE)
    names = fresh_outputs[f"{set_name}/classify/top5_names"]
    assert [[n.decode() for n in row] for row in names] == \
        [[class_names[c] for c in row] for row in top_classes]


def test_knn_returns_the_nearest_bank_rows_and_their_vote(run, fresh_outputs):
    bank = run.bank["embeddings"].astype(np.float64)
    labels = run.bank["labels"]
    classes = np.where(labels < run.num_classes, labels, -1)
    k = min(run.config.method_settings.k, len(bank))
    for set_name in ("stripes", "resized", "gray"):
        embedding = fresh_outputs[f"{set_name}/embed/embedding"].astype(np.float64)
        nearest, probabilities = _knn_vote(embedding, bank, classes, k,
                                           run.config.method_settings.temperature, run.num_classes)
        rows = fresh_outputs[f"{set_name}/knn/neighbor_rows"]
        np.testing.assert_array_equal(rows[:, 0], nearest[:, 0])
        np.testing.assert_array_equal(fresh_outputs[f"{set_name}/knn/neighbor_classes"][:, 0],
                                      classes[nearest[:, 0]])
        np.testing.assert_allclose(fresh_outputs[f"{set_name}/knn/neighbor_similarities"],
                                   np.take_along_axis(embedding @ bank.T, rows, axis=1),
                                   atol=TOLERANCE)
        np.testing.assert_allclose(fresh_outputs[f"{set_name}/knn/knn_probabilities"],
                                   probabilities, atol=1e-4)
        expected_class = np.where(probabilities.sum(axis=1) > 0,
                                  probabilities.argmax(axis=1), -1)
        np.testing.assert_array_equal(fresh_outputs[f"{set_name}/knn/knn_class"],
                                      expected_class)
        np.testing.assert_allclose(fresh_outputs[f"{set_name}/knn/knn_confidence"],
                                   probabilities.max(axis=1), atol=1e-4)


def test_tfsm_layer_fine_tunes_the_exported_weights(run, fresh_outputs):
    assert fresh_outputs["tfsm_trainable"] == len(run.model.trainable_variables)
    assert fresh_outputs["tfsm_non_trainable"] == len(run.model.non_trainable_variables)
    np.testing.assert_allclose(fresh_outputs["tfsm_embedding"],
                               fresh_outputs["stripes/embed/embedding"], atol=TOLERANCE)
    # Every weight on the embedding's path gets a gradient; only the category
    # head's kernel and bias do not.
    assert fresh_outputs["tfsm_with_gradient"] == len(run.model.trainable_variables) - 2
    change = np.abs(fresh_outputs["tfsm_embedding_after_step"] - fresh_outputs["tfsm_embedding"])
    assert change.max() > 1e-3


def test_export_info_describes_the_signatures_and_the_source(run, class_names,
                                                             tiny_llp_export):
    model_dir, returned = tiny_llp_export
    with open(os.path.join(model_dir, saved_model.EXPORT_INFO_FILE)) as f:
        info = json.load(f)
    assert info == json.loads(json.dumps(returned))
    assert info["image_size"] == 16 and info["num_classes"] == 4
    assert info["class_names"] == list(class_names)
    assert info["source"]["step"] == run.step == 15
    assert info["source"]["checkpoint"] == os.path.abspath(run.checkpoint)
    assert set(info["signatures"]) == {"embed", "classify", "knn"}
    assert info["signatures"]["embed"]["embedding"]["shape"] == "[B, 16]"
    assert info["knn"]["k"] == 3 and info["knn"]["bank_rows"] == 160
    assert info["knn"]["bank_rows_with_class"] == int(np.sum(
        run.bank["labels"] < run.num_classes))
    # Written through a temporary directory that is gone.
    assert os.listdir(os.path.dirname(model_dir)) == ["model"]


def test_knn_vote_ignores_rows_without_a_class(run, class_names, image_sets):
    images = image_sets["stripes"][::2]  # one image per class
    embedding = _reference(run, images)["embedding"]
    module = InferenceModule(run.model, run.config.data.image_size, class_names,
                             bank_embeddings=embedding.astype(np.float32),
                             bank_classes=np.full(4, -1, np.int64), k=3,
                             temperature=run.config.method_settings.temperature)
    outputs = module.knn(tf.constant(images))
    np.testing.assert_array_equal(outputs["knn_class"].numpy(), [-1] * 4)
    np.testing.assert_array_equal(outputs["knn_confidence"].numpy(), [0.0] * 4)
    np.testing.assert_array_equal(outputs["knn_probabilities"].numpy(), np.zeros((4, 4)))

    # Each image's own row (similarity 1) has no class: its vote comes from
    # the next two rows only.
    classes = np.array([-1, 1, 2, 3], np.int64)
    module.bank_classes.assign(classes)
    outputs = module.knn(tf.constant(images))
    nearest, probabilities = _knn_vote(embedding, embedding, classes, 3,
                                       run.config.method_settings.temperature, 4)
    np.testing.assert_array_equal(outputs["neighbor_rows"].numpy(), nearest)
    np.testing.assert_allclose(outputs["knn_probabilities"].numpy(), probabilities, atol=1e-4)
    np.testing.assert_array_equal(outputs["knn_class"].numpy(), probabilities.argmax(axis=1))
    assert outputs["neighbor_classes"].numpy()[0, 0] == -1


def test_unbatched_images_two_channels_and_empty_batches_are_refused(run, class_names):
    module = InferenceModule(run.model, run.config.data.image_size, class_names)
    for unbatched in ([8, 8, 3], [8, 8], [1, 1, 8, 8, 3]):
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"must be a batch \[B, H, W, C\]; add a batch dimension"):
            module.classify(tf.zeros(unbatched, tf.uint8))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"1 \(grayscale\) or 3 \(RGB\)"):
        module.embed(tf.zeros([1, 8, 8, 2], tf.uint8))
    with pytest.raises(tf.errors.InvalidArgumentError, match="at least one image"):
        module.embed(tf.zeros([0, 8, 8, 3], tf.uint8))


def test_an_existing_export_is_kept_without_overwrite(run, class_names, tmp_path):
    existing = tmp_path / "model"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="already exists"):
        saved_model.export_run(run, class_names, str(existing))
    assert os.listdir(existing) == ["keep.txt"]


def test_bad_class_names_and_knn_without_a_bank_are_clear_errors(run, class_names):
    with pytest.raises(ConfigError, match="4 classes but 3 class names"):
        saved_model.build_inference_module(run, class_names[:3])
    supervised = dataclasses.replace(
        run, bank=None, config=run.config.replace(method="supervised"))
    with pytest.raises(ConfigError, match="no memory bank"):
        saved_model.build_inference_module(supervised, class_names, include_knn=True)
    # Without knn a run without a bank exports embed and classify.
    module = saved_model.build_inference_module(supervised, class_names)
    assert module.knn_k is None and not hasattr(module, "knn")


def test_bank_classes_maps_instance_ids_to_minus_one():
    np.testing.assert_array_equal(bank_classes([0, 3, 4, 9, 2], 4), [0, 3, -1, -1, 2])
