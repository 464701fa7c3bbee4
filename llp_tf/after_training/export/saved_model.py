"""A trained run as a self-contained TensorFlow SavedModel (ops and variables only; loads
without llp_tf): signatures ``embed``, ``classify`` (``serving_default``) and, with the
memory bank, ``knn``, each taking ``images`` uint8 [B, H, W, C] (their outputs:
`inference_module`, docs/after-training.md), with ``export_info.json`` and optionally
``model.onnx`` and ``model.keras``."""

import datetime
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from llp_tf.after_training.export import keras_model, onnx_model
from llp_tf.after_training.export.inference_module import (CLASSIFY, EMBED, KNN, TOP_CLASSES,
                                                           InferenceModule, bank_classes)
from llp_tf.after_training.run_loader import TrainedRun
from llp_tf.counted_nouns import listed
from llp_tf.data.augmentation import eval_transform, weak
from llp_tf.data.sources.imagenet_names import readable_class_names
from llp_tf.errors import ConfigError
from llp_tf.training.run_directory import RunDirectory

EXPORT_INFO_FILE = "export_info.json"
# Version of the layout of this SavedModel and its export_info.json; raise it
# when a signature or a field changes meaning.
EXPORT_FORMAT_VERSION = 2
SAVED_MODEL_FILE = "saved_model.pb"
#: Everything an export directory holds.
EXPORT_ENTRIES = frozenset({SAVED_MODEL_FILE, "fingerprint.pb", "variables", "assets",
                            EXPORT_INFO_FILE, onnx_model.ONNX_FILE,
                            keras_model.KERAS_FILE})

_INPUT_DOC = {"images": {"dtype": "uint8", "shape": "[B, H, W, C]",
                         "doc": "B >= 1 (a single image needs its batch dimension); any H "
                                "and W, one size per call; C = 1 (grayscale) or 3 (RGB)"}}


def _output_docs(num_classes, feature_dim, embedding_dim, knn_k):
    top = min(TOP_CLASSES, num_classes)
    docs = {
        EMBED: {
            "embedding": {"dtype": "float32", "shape": f"[B, {embedding_dim}]",
                          "doc": "unit-norm embedding"},
            "features": {"dtype": "float32", "shape": f"[B, {feature_dim}]",
                         "doc": "pooled trunk output"},
        },
        CLASSIFY: {
            "probabilities": {"dtype": "float32", "shape": f"[B, {num_classes}]",
                              "doc": "softmax of the category head"},
            "top5_classes": {"dtype": "int64", "shape": f"[B, {top}]", "doc": "best first"},
            "top5_probabilities": {"dtype": "float32", "shape": f"[B, {top}]",
                                   "doc": "their probabilities"},
            "top5_names": {"dtype": "string", "shape": f"[B, {top}]",
                           "doc": "their class names"},
        },
    }
    if knn_k is not None:
        docs[KNN] = {
            "neighbor_rows": {"dtype": "int64", "shape": f"[B, {knn_k}]",
                              "doc": "bank rows with the largest embedding . row, best first"},
            "neighbor_similarities": {"dtype": "float32", "shape": f"[B, {knn_k}]",
                                      "doc": "their dot products with the embedding"},
            "neighbor_classes": {"dtype": "int64", "shape": f"[B, {knn_k}]",
                                 "doc": "their classes, -1 where a row has no class"},
            "knn_probabilities": {"dtype": "float32", "shape": f"[B, {num_classes}]",
                                  "doc": "weighted k-NN vote (eq. 5-6): per class, the "
                                         "normalised sum of exp(similarity / tau) of the "
                                         "neighbours of that class"},
            "knn_class": {"dtype": "int64", "shape": "[B]",
                          "doc": "argmax of the vote; -1 if no neighbour has a class"},
            "knn_confidence": {"dtype": "float32", "shape": "[B]",
                               "doc": "the winning class's share of the vote"},
        }
    return docs


def _onnx_info(image_size, signatures):
    return {"file": onnx_model.ONNX_FILE, "opset": onnx_model.OPSET,
            "input": onnx_model.input_doc(image_size),
            "outputs": {onnx_model.PROBABILITIES: signatures[CLASSIFY]["probabilities"],
                        onnx_model.EMBEDDING: signatures[EMBED]["embedding"]}}


def build_inference_module(run: TrainedRun, class_names: Sequence[str],
                           include_knn: bool = False) -> InferenceModule:
    """An `InferenceModule` of a restored run with its C ``class_names`` (and, with
    ``include_knn``, its bank); ImageNet's WordNet ids become readable names ("tench").
    ConfigError: wrong number of names, or knn without a bank."""
    class_names = readable_class_names(class_names)
    if len(class_names) != run.num_classes:
        raise ConfigError(
            f"The run {run.run_dir} has {run.num_classes} classes but {len(class_names)} "
            "class names were given; give the class names of the run's dataset.")
    if not include_knn:
        return InferenceModule(run.model, run.config.data.image_size, class_names)
    if run.bank is None:
        raise ConfigError(
            f"The run {run.run_dir} is a {run.config.method.name} run and has no memory bank, "
            "so it cannot export a knn signature; export it without knn.")
    settings = run.config.method_settings
    return InferenceModule(run.model, run.config.data.image_size, class_names,
                           bank_embeddings=run.bank["embeddings"],
                           bank_classes=bank_classes(run.bank["labels"], run.num_classes),
                           k=settings.k, temperature=settings.temperature)


def export_info(run: TrainedRun, module: InferenceModule) -> dict[str, Any]:
    """The dict written to export_info.json."""
    info = {
        "format_version": EXPORT_FORMAT_VERSION,
        "input": _INPUT_DOC,
        "preprocessing": (
            f"inside the signatures: resize the short side to "
            f"{eval_transform.eval_short_side(module.image_size)} (bilinear, antialiased), centre "
            f"crop {module.image_size} x {module.image_size}, scale to [0, 1], normalise "
            f"with mean {list(weak.IMAGENET_MEAN)} and std {list(weak.IMAGENET_STD)}"),
        "signatures": _output_docs(module.num_classes, run.model.feature_dim,
                                   run.config.model.embedding_dim, module.knn_k),
        "serving_default": CLASSIFY,
        "image_size": module.image_size,
        "num_classes": module.num_classes,
        "class_names": list(module._class_names),
        "source": {
            "run_dir": os.path.abspath(run.run_dir),
            "checkpoint": os.path.abspath(run.checkpoint),
            "step": int(run.step),
            "method": run.config.method.name,
            "dataset": run.config.data.dataset,
            "architecture": run.config.model.architecture,
        },
        "tensorflow_version": tf.__version__,
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if module.knn_k is not None:
        classes = module.bank_classes.numpy()
        info["knn"] = {
            "k": module.knn_k, "temperature": module._temperature,
            "bank_rows": int(classes.size),
            "bank_rows_with_class": int(np.sum(classes >= 0)),
            "vote": "weighted k-NN (paper eq. 5-6) over the K nearest bank rows that have a "
                    "class, weight exp(similarity / temperature)",
        }
    return info


def export_run(run: TrainedRun, class_names: Sequence[str], output_dir: str,
               include_knn: bool = False, overwrite: bool = False,
               include_onnx: bool = False, include_keras: bool = False) -> dict[str, Any]:
    """`build_inference_module`, then `save_module`; returns the export info written."""
    check_output_dir(output_dir, overwrite)
    return save_module(run, build_inference_module(run, class_names, include_knn), output_dir,
                       overwrite, include_onnx, include_keras)


def is_export(path: str) -> bool:
    """Whether ``path`` is a directory (not a link) holding saved_model.pb and
    export_info.json and nothing outside `EXPORT_ENTRIES`."""
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    names = set(os.listdir(path))
    return {SAVED_MODEL_FILE, EXPORT_INFO_FILE} <= names <= EXPORT_ENTRIES


def check_output_dir(output_dir: str, overwrite: bool) -> None:
    """Raises ConfigError unless ``output_dir`` does not exist or, with ``overwrite``, is an
    earlier export (`is_export`) or empty."""
    output_dir = os.path.abspath(output_dir)
    if not os.path.lexists(output_dir):
        return
    if not overwrite:
        raise ConfigError(
            f"{output_dir} already exists; choose another output directory or pass "
            "--overwrite to replace it.")
    if os.path.islink(output_dir) or not os.path.isdir(output_dir):
        held = "is not a directory"
    elif is_export(output_dir) or not os.listdir(output_dir):
        return
    elif RunDirectory(output_dir).training_record():
        held = f"holds a training run ({listed(RunDirectory(output_dir).training_record())})"
    else:
        held = f"is not an earlier export (it holds {listed(sorted(os.listdir(output_dir)))})"
    raise ConfigError(f"{output_dir} {held}, so --overwrite does not replace it: choose "
                      "another --output_dir.")


def save_module(run: TrainedRun, module: InferenceModule, output_dir: str,
                overwrite: bool = False, include_onnx: bool = False,
                include_keras: bool = False) -> dict[str, Any]:
    """Writes ``module`` as a SavedModel with export_info.json (and, with ``include_onnx``,
    model.onnx; with ``include_keras``, model.keras) into ``output_dir``, atomically: built
    beside it and renamed into place, an earlier export replaced only once the new one is
    complete. Returns the export info.

    Raises:
      ConfigError: `check_output_dir`; tf2onnx is missing or cannot convert the network.
    """
    check_output_dir(output_dir, overwrite)
    output_dir = os.path.abspath(output_dir)
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(output_dir)}.export-", dir=parent)
    partial, replaced = os.path.join(staging, "new"), os.path.join(staging, "previous")
    try:
        tf.saved_model.save(module, partial, signatures=module.trace_signatures())
        info = export_info(run, module)
        if include_onnx:
            onnx_model.write_onnx_model(run.model, module.image_size, info["class_names"],
                                        os.path.join(partial, onnx_model.ONNX_FILE))
            info["onnx"] = _onnx_info(module.image_size, info["signatures"])
        if include_keras:
            keras_model.write_keras_model(run.model, os.path.join(partial, keras_model.KERAS_FILE))
            info["keras"] = keras_model.keras_info(module.image_size, run.model.feature_dim,
                                                   run.config.model.embedding_dim,
                                                   module.num_classes)
        with open(os.path.join(partial, EXPORT_INFO_FILE), "w") as f:
            json.dump(info, f, indent=2)
            f.write("\n")
        check_output_dir(output_dir, overwrite)
        had_previous = os.path.lexists(output_dir)
        if had_previous:
            os.rename(output_dir, replaced)
        try:
            os.rename(partial, output_dir)
        except BaseException:
            if had_previous:
                os.rename(replaced, output_dir)
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return info
