"""What an export wrote, in the lines tools/export.py prints, from its export info."""

import os
from typing import Any, Mapping

from llp_tf.after_training.export.saved_model import EXPORT_INFO_FILE
from llp_tf.tool_names import tool

_BYTES_PER_MB = 1024 * 1024
#: What the ONNX and Keras models' images are preprocessed with.
PREPROCESSING = "llp_tf.after_training.export.onnx_model.preprocess_for_onnx"


def _directory_megabytes(path):
    total = 0
    for folder, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(folder, name)) for name in files)
    return total / _BYTES_PER_MB


def describe_signatures(info: Mapping[str, Any]) -> list[str]:
    """Lines naming each signature of an export info dict and its outputs."""
    lines = []
    for name, outputs in info["signatures"].items():
        alias = " (also serving_default)" if name == info.get("serving_default") else ""
        lines.append(f"  {name}(images uint8 [B, H, W, C]){alias} ->")
        for output, spec in outputs.items():
            lines.append(f"    {output}: {spec['dtype']} {spec['shape']}  {spec['doc']}")
    return lines


def describe_onnx(onnx_info: Mapping[str, Any], output_dir: str) -> str:
    """The line naming the ONNX model of an export info's "onnx" entry."""
    (name, spec), = onnx_info["input"].items()
    outputs = ", ".join(f"{output} {output_spec['dtype']} {output_spec['shape']}"
                        for output, output_spec in onnx_info["outputs"].items())
    return (f"ONNX model {os.path.join(output_dir, onnx_info['file'])} (opset "
            f"{onnx_info['opset']}): {name} {spec['dtype']} {spec['shape']} preprocessed "
            f"({PREPROCESSING}) -> {outputs}")


def describe_keras(keras_info: Mapping[str, Any], output_dir: str) -> str:
    """The line naming the Keras model of an export info's "keras" entry."""
    (name, spec), = keras_info["input"].items()
    outputs = ", ".join(f"{output} {output_spec['shape']}"
                        for output, output_spec in keras_info["outputs"].items())
    return (f"Keras model {os.path.join(output_dir, keras_info['file'])}: {name} "
            f"{spec['dtype']} {spec['shape']} preprocessed ({PREPROCESSING}) -> {outputs}; "
            f"load with: {keras_info['load']}")


def written_lines(info: Mapping[str, Any], output_dir: str, include_onnx: bool) -> list[str]:
    """The lines about the export in ``output_dir`` (with ``include_onnx``, its model.onnx;
    its model.keras where ``info`` has a "keras" entry)."""
    lines = [f"Wrote {output_dir} ({_directory_megabytes(output_dir):.1f} MB) with "
             f"{EXPORT_INFO_FILE}",
             f"Input of every signature: images uint8 [B, H, W, C], any H and W (one size per "
             f"call), C = 1 or 3; resized and centre-cropped to {info['image_size']} px "
             "inside.",
             "Signatures:"]
    lines += describe_signatures(info)
    if include_onnx:
        lines.append(describe_onnx(info["onnx"], output_dir))
    if "keras" in info:
        lines.append(describe_keras(info["keras"], output_dir))
    lines.append(f"Try it: {tool('predict')} --model_dir={output_dir} IMAGE.png")
    return lines
