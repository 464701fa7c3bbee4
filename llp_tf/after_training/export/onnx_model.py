"""A trained run's network as an ONNX model (docs/onnx.md): ``images`` float32
[batch, S, S, 3] already preprocessed (`preprocess_for_onnx`) in, ``probabilities`` float32
[batch, C] and ``embedding`` float32 [batch, D] out; class names and S in its metadata."""

import json
from collections.abc import Iterable, Sequence

import keras
import numpy as np
import tensorflow as tf

from llp_tf.data.augmentation import eval_transform, weak
from llp_tf.errors import ConfigError
from llp_tf.tensor_types import Array

ONNX_FILE = "model.onnx"
OPSET = 17
INPUT = "images"
PROBABILITIES = "probabilities"
EMBEDDING = "embedding"
BATCH_AXIS = "batch"
CLASS_NAMES_KEY = "class_names"
IMAGE_SIZE_KEY = "image_size"


def input_doc(image_size: int) -> dict[str, dict[str, str]]:
    """The ONNX model's input, described for export_info.json."""
    return {INPUT: {"dtype": "float32", "shape": f"[B, {image_size}, {image_size}, 3]",
                    "doc": "NHWC RGB images after the evaluation transform (llp_tf's "
                           "onnx_model.preprocess_for_onnx); B >= 1"}}


def _converter():
    """The modules tf2onnx and onnx; ConfigError when either is missing."""
    try:
        import onnx  # noqa: PLC0415
        import tf2onnx  # noqa: PLC0415
    except ImportError as error:
        raise ConfigError(
            f"Exporting to ONNX needs the packages tf2onnx and onnx ({error}); install the "
            "versions of requirements.txt (pip install tf2onnx==1.17.0 onnx==1.23.2) or "
            "export without --onnx.") from error
    return tf2onnx, onnx


def require_converter() -> None:
    """Raises ConfigError unless tf2onnx and onnx can be imported."""
    _converter()


def network_function(model: keras.layers.Layer,
                     image_size: int) -> tf.types.experimental.PolymorphicFunction:
    """float32 [B, S, S, 3] preprocessed images -> {"probabilities": float32 [B, C],
    "embedding": float32 [B, D]}."""
    @tf.function(input_signature=[_input_spec(image_size)])
    def network(images):
        outputs = model(images, training=False)
        return {PROBABILITIES: tf.nn.softmax(outputs["logits"], axis=-1),
                EMBEDDING: outputs["embedding"]}
    return network


def _input_spec(image_size):
    return tf.TensorSpec([None, image_size, image_size, 3], tf.float32, name=INPUT)


def write_onnx_model(model: keras.layers.Layer, image_size: int, class_names: Sequence[str],
                     path: str) -> None:
    """Converts ``model`` (`network_function`) to the ONNX file ``path`` with ``class_names``
    in its metadata. ConfigError: tf2onnx or onnx is missing, or the conversion failed."""
    tf2onnx, onnx = _converter()
    try:
        proto, _ = tf2onnx.convert.from_function(
            network_function(model, image_size), input_signature=[_input_spec(image_size)],
            opset=OPSET)
        _name_batch_axis(proto)
        onnx.checker.check_model(proto, full_check=True)
    except Exception as error:  # noqa: BLE001 -- tf2onnx raises many kinds
        raise ConfigError(
            f"tf2onnx {tf2onnx.__version__} could not convert the network to ONNX opset "
            f"{OPSET} ({type(error).__name__}: {error}); export without --onnx.") from error
    onnx.helper.set_model_props(proto, {CLASS_NAMES_KEY: json.dumps(list(class_names)),
                                        IMAGE_SIZE_KEY: str(image_size)})
    onnx.save(proto, path)


def _name_batch_axis(proto):
    """Names the dynamic first axis of the inputs and outputs `BATCH_AXIS`."""
    for value in list(proto.graph.input) + list(proto.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = BATCH_AXIS


def preprocess_for_onnx(images: Iterable[Array], image_size: int) -> Array:
    """float32 [N, S, S, 3]: the SavedModel's preprocessing (`eval_transform.eval_preprocess`)
    in numpy of uint8 [N, H, W, C] or N uint8 [H_i, W_i, C] of any sizes, C = 1 or 3."""
    short_side = eval_transform.eval_short_side(image_size)
    mean = np.asarray(weak.IMAGENET_MEAN)
    std = np.asarray(weak.IMAGENET_STD)
    batch = []
    for image in images:
        image = np.asarray(image)
        if image.ndim != 3 or image.shape[2] not in (1, 3) or image.dtype != np.uint8:
            raise ValueError("Each image must be uint8 [H, W, 1 or 3]; got "
                             f"{image.dtype} {list(image.shape)}.")
        height, width = _resized_shape(image.shape[0], image.shape[1], short_side)
        top, left = (height - image_size) // 2, (width - image_size) // 2
        rows = _resize_weights(image.shape[0], height)[top:top + image_size]
        columns = _resize_weights(image.shape[1], width)[left:left + image_size]
        resized = np.einsum("lk,ikc->ilc", columns, np.einsum("ij,jkc->ikc", rows, image))
        unit = np.clip(np.broadcast_to(resized, resized.shape[:2] + (3,)) / 255.0, 0.0, 1.0)
        batch.append((unit - mean) / std)
    return np.asarray(batch, np.float32).reshape(-1, image_size, image_size, 3)


def _resized_shape(height, width, short_side):
    """(height, width) as `eval_transform.resize_short_side` computes them (float32)."""
    shape = np.array([height, width], np.float32)
    scale = np.float32(short_side) / shape.min()
    resized = np.maximum(np.round(shape * scale).astype(np.int64), short_side)
    resized[shape <= shape.min()] = short_side
    return int(resized[0]), int(resized[1])


def _resize_weights(size, new_size):
    """float64 [new_size, size]: the weights of TensorFlow's antialiased bilinear resize
    (ScaleAndTranslate, triangle kernel), with its float32 positions."""
    scale = np.float32(new_size) / np.float32(size)
    stretch = np.float32(1.0 / np.float64(scale))
    centres = (np.arange(new_size, dtype=np.float32) + np.float32(0.5)) * stretch
    positions = np.arange(size, dtype=np.float32) + np.float32(0.5)
    distance = np.abs(positions[None, :] - centres[:, None]) / max(stretch, np.float32(1.0))
    weights = np.maximum(0.0, 1.0 - distance.astype(np.float64))
    return weights / weights.sum(axis=1, keepdims=True)
