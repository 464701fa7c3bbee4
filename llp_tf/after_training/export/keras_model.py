"""A trained run's network as a native Keras 3 file, ``model.keras`` (docs/after-training.md):
the `EmbeddingClassifier` (trunk, embedding and category heads) with its weights and batch-norm
moving statistics, taking float32 images [B, S, S, 3] already preprocessed with the evaluation
transform (`onnx_model.preprocess_for_onnx`) and returning "features" [B, F], "embedding"
[B, D] and "logits" [B, C]. `keras.saving.load_model` opens it in safe mode once `llp_tf`
is imported (`keras_registration`); ``fit`` trains every weight, batch norm in training
mode."""

import keras

from llp_tf.after_training.export.onnx_model import input_doc
from llp_tf.models.embedding_classifier import EmbeddingClassifier

KERAS_FILE = "model.keras"
#: What a process imports before `keras.saving.load_model` opens the file.
REGISTERING_MODULE = "llp_tf"


def write_keras_model(model: EmbeddingClassifier, path: str) -> None:
    """Saves the built ``model`` (float32) to ``path`` with its config and weights, without an
    optimizer."""
    model.save(path, include_optimizer=False)


def keras_info(image_size: int, feature_dim: int, embedding_dim: int,
               num_classes: int) -> dict:
    """The "keras" entry of export_info.json."""
    (name, spec), = input_doc(image_size).items()
    return {
        "file": KERAS_FILE, "keras_version": keras.__version__,
        "load": f"import {REGISTERING_MODULE}; keras.saving.load_model(path)",
        "input": {name: spec},
        "outputs": {
            "features": {"dtype": "float32", "shape": f"[B, {feature_dim}]",
                         "doc": "pooled trunk output"},
            "embedding": {"dtype": "float32", "shape": f"[B, {embedding_dim}]",
                          "doc": "unit-norm embedding"},
            "logits": {"dtype": "float32", "shape": f"[B, {num_classes}]",
                       "doc": "category head; softmax gives classify's probabilities"},
        },
    }
