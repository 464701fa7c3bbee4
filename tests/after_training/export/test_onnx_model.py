import json
import os
import sys

import numpy as np
import onnxruntime
import pytest
import tensorflow as tf

from llp_tf.after_training.export import onnx_model
from llp_tf.after_training.export.inference_module import InferenceModule
from llp_tf.data.augmentation import weak
from llp_tf.errors import ConfigError

# Both sides run the float32 network with the same weights and differ only in
# op implementations (convolution algorithms, summation order, batch norm
# folded into the convolutions by tf2onnx): a float32 rounding of ~1e-7 per
# op, which reaches ~1e-6 in outputs of size <= 1 (probabilities, unit-norm
# embedding; measured 5e-7). A wrong weight, layer or preprocessing moves
# them by far more.
TOLERANCE = 1e-5
# TensorFlow computes the preprocessing in float32: a few roundings of
# values up to (1 - 0.406) / 0.225 = 2.7 (ulp 2.4e-7) after the resize's sum
# of 8-bit levels; measured 1.5e-6. Float64 sample positions instead of
# TensorFlow's float32 ones already move a pixel by 1.1e-4 at S = 224.
PREPROCESS_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def session(tiny_llp_export):
    model_dir, _ = tiny_llp_export
    return onnxruntime.InferenceSession(os.path.join(model_dir, onnx_model.ONNX_FILE),
                                        providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def loaded(tiny_llp_export):
    return tf.saved_model.load(tiny_llp_export[0])


def _images(shape, seed):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _run(session, images):
    probabilities, embedding = session.run([onnx_model.PROBABILITIES, onnx_model.EMBEDDING],
                                           {onnx_model.INPUT: images})
    return probabilities, embedding


def test_the_model_has_the_documented_input_outputs_and_metadata(session, class_names,
                                                                  tiny_llp_export):
    assert [(i.name, i.shape, i.type) for i in session.get_inputs()] == [
        ("images", ["batch", 16, 16, 3], "tensor(float)")]
    assert sorted((o.name, o.shape, o.type) for o in session.get_outputs()) == [
        ("embedding", ["batch", 16], "tensor(float)"),
        ("probabilities", ["batch", 4], "tensor(float)")]
    metadata = session.get_modelmeta().custom_metadata_map
    assert json.loads(metadata["class_names"]) == list(class_names)
    assert metadata["image_size"] == "16"
    info = tiny_llp_export[1]["onnx"]
    assert info["file"] == "model.onnx" and info["opset"] == 17
    assert info["input"]["images"]["shape"] == "[B, 16, 16, 3]"
    assert {name: spec["shape"] for name, spec in info["outputs"].items()} == {
        "probabilities": "[B, 4]", "embedding": "[B, 16]"}


@pytest.mark.parametrize("shape", [(1, 16, 16, 3), (6, 23, 37, 3), (4, 20, 20, 1),
                                   (3, 40, 12, 3)])
def test_onnx_runtime_gives_the_saved_models_outputs(session, loaded, shape):
    raw = _images(shape, seed=shape[0])
    probabilities, embedding = _run(session, onnx_model.preprocess_for_onnx(raw, 16))
    assert probabilities.shape == (shape[0], 4) and embedding.shape == (shape[0], 16)
    np.testing.assert_allclose(probabilities, loaded.classify(raw)["probabilities"].numpy(),
                               rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(embedding, loaded.embed(raw)["embedding"].numpy(),
                               rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(probabilities.astype(np.float64).sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(embedding.astype(np.float64), axis=1), 1.0,
                               atol=1e-6)


def test_one_batch_holds_images_of_different_sizes(session, loaded):
    images = [_images(shape, seed) for seed, shape in enumerate(
        [(16, 16, 3), (23, 37, 3), (20, 20, 1), (9, 5, 3), (64, 48, 3)])]
    probabilities, embedding = _run(session, onnx_model.preprocess_for_onnx(images, 16))
    for row, image in enumerate(images):
        np.testing.assert_allclose(probabilities[row],
                                   loaded.classify(image[None])["probabilities"].numpy()[0],
                                   rtol=0, atol=TOLERANCE)
        np.testing.assert_allclose(embedding[row],
                                   loaded.embed(image[None])["embedding"].numpy()[0],
                                   rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("batch", [1, 5])
def test_onnx_runtime_gives_the_networks_outputs_on_preprocessed_images(session, run, batch):
    images = np.random.default_rng(batch).normal(0.0, 1.0, (batch, 16, 16, 3)).astype(
        np.float32)
    probabilities, embedding = _run(session, images)
    outputs = run.model(images, training=False)
    logits = outputs["logits"].numpy().astype(np.float64)
    exponentials = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(probabilities, exponentials / exponentials.sum(axis=1,
                                                                              keepdims=True),
                               rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(embedding, outputs["embedding"].numpy(), rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("image_size", [16, 224])
def test_preprocess_for_onnx_is_the_saved_models_preprocessing(run, class_names, image_size):
    # Only `preprocess` runs: the network never sees the S = 224 images.
    module = InferenceModule(run.model, image_size, class_names)
    shapes = [(image_size, image_size, 3), (23, 37, 3), (20, 20, 1), (5, 9, 3), (300, 17, 3),
              (image_size + 1, image_size + 3, 1), (2 * image_size + 5, 3 * image_size, 3)]
    for seed, shape in enumerate(shapes):
        image = _images(shape, seed)
        expected = module.preprocess(tf.constant(image[None])).numpy()
        np.testing.assert_allclose(onnx_model.preprocess_for_onnx([image], image_size),
                                   expected, rtol=0, atol=PREPROCESS_TOLERANCE,
                                   err_msg=str(shape))


def test_preprocess_for_onnx_of_a_plain_image_is_its_normalised_colour():
    colour = np.array([200, 31, 90])
    images = np.broadcast_to(colour, (2, 29, 41, 3)).astype(np.uint8)
    expected = (colour / 255.0 - np.array(weak.IMAGENET_MEAN)) / np.array(
        weak.IMAGENET_STD)
    got = onnx_model.preprocess_for_onnx(images, 16)
    assert got.shape == (2, 16, 16, 3) and got.dtype == np.float32
    np.testing.assert_allclose(got, np.broadcast_to(expected, got.shape), rtol=0, atol=1e-6)


@pytest.mark.parametrize("image", [np.zeros((8, 8, 3), np.float32),
                                   np.zeros((8, 8, 2), np.uint8), np.zeros((8, 8), np.uint8)])
def test_preprocess_for_onnx_refuses_other_images(image):
    with pytest.raises(ValueError, match=r"uint8 \[H, W, 1 or 3\]"):
        onnx_model.preprocess_for_onnx([image], 16)


def test_a_missing_converter_and_a_failed_conversion_are_config_errors(run, monkeypatch,
                                                                       tmp_path):
    import tf2onnx
    path = str(tmp_path / "model.onnx")

    def fail(*args, **kwargs):
        raise ValueError("tf2onnx cannot convert the op Foo")

    monkeypatch.setattr(tf2onnx.convert, "from_function", fail)
    with pytest.raises(ConfigError, match=r"could not convert the network to ONNX opset 17 "
                                          r"\(ValueError: tf2onnx cannot convert the op Foo\)"):
        onnx_model.write_onnx_model(run.model, 16, ["a", "b", "c", "d"], path)
    monkeypatch.setitem(sys.modules, "tf2onnx", None)
    with pytest.raises(ConfigError, match="needs the packages tf2onnx and onnx"):
        onnx_model.require_converter()
    with pytest.raises(ConfigError, match="needs the packages tf2onnx and onnx"):
        onnx_model.write_onnx_model(run.model, 16, ["a", "b", "c", "d"], path)
    assert not os.path.exists(path)
