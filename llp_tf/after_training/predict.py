"""Classifying image files with a SavedModel of `llp_tf.after_training.export`
(`classify_files`), writing each image's `top_classes` as text, JSON Lines or CSV. Imports
numpy and, once called, TensorFlow: it runs where only TensorFlow and llp_tf are installed."""

import csv
import glob
import json
import os
import re
from typing import Callable, Sequence, TextIO

import numpy as np

from llp_tf.tensor_types import Array
from llp_tf.tool_names import tool

CLASSIFY = "classify"
SAVED_MODEL_FILE = "saved_model.pb"
EXPORT_INFO_FILE = "export_info.json"
DEFAULT_TOP = 5
DEFAULT_BATCH_SIZE = 32
# As the training pipeline decodes them: grayscale repeated, alpha dropped.
DECODE_CHANNELS = 3
# Files a directory or a pattern contributes (any case).
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".bmp")
FORMATS = ("text", "json", "csv")
CSV_HEADER = ("path", "rank", "class", "name", "probability")
GLOB_CHARACTERS = re.compile(r"[*?\[]")


# The "{{function_node ...}}" and "[Op:...]" decorations of TensorFlow's op errors.
_OP_ERROR_DECORATION = re.compile(r"\{\{.*?\}\}\s*|\s*\[Op:.*$", re.S)


class PredictError(Exception):
    """Bad input: a missing or unusable model (the tool stops), or a missing or
    undecodable image (the tool reports it and goes on)."""


def _is_image_name(path):
    return path.lower().endswith(IMAGE_EXTENSIONS)


def _directory_images(directory):
    found = []
    for folder, _, files in os.walk(directory):
        found += [os.path.join(folder, name) for name in files if _is_image_name(name)]
    return sorted(found)


def expand_arguments(arguments: Sequence[str]) -> tuple[list[str], list[str]]:
    """(image paths, problems) of files, directories (recursive, sorted) and glob patterns,
    in order, each once: a file named on its own is kept even if missing; a problem per
    directory or pattern without an image."""
    paths, problems = [], []
    for argument in arguments:
        if os.path.isdir(argument):
            found = _directory_images(argument)
            what = "directory"
        elif GLOB_CHARACTERS.search(argument) and not os.path.exists(argument):
            found = []
            for match in sorted(glob.glob(argument, recursive=True)):
                found += (_directory_images(match) if os.path.isdir(match) else
                          [match] if _is_image_name(match) else [])
            what = "pattern"
        else:
            found, what = [argument], None
        if not found:
            problems.append(f"{argument}: the {what} holds no PNG, JPEG, GIF or BMP file")
        paths += found
    return list(dict.fromkeys(paths)), problems


def read_image(path: str) -> Array:
    """uint8 [H, W, 3] of an image file; PredictError: a missing or undecodable file."""
    import tensorflow as tf  # noqa: PLC0415

    if not os.path.isfile(path):
        raise PredictError(f"{path}: no such image file")
    try:
        encoded = tf.io.read_file(path)
        return tf.io.decode_image(encoded, channels=DECODE_CHANNELS,
                                  expand_animations=False).numpy()
    except tf.errors.OpError as error:
        reason = _OP_ERROR_DECORATION.sub("", error.message).strip()
        raise PredictError(f"{path}: cannot be read as a PNG, JPEG, GIF or BMP image "
                           f"({reason})") from None


def load_model(model_dir: str) -> tuple[Callable, list[str]]:
    """(classify function, class names) of an export; PredictError: not one."""
    import tensorflow as tf  # noqa: PLC0415

    if not os.path.isfile(os.path.join(model_dir, SAVED_MODEL_FILE)):
        raise PredictError(f"{model_dir} is not a SavedModel (it has no {SAVED_MODEL_FILE}); "
                           f"give the --output_dir of {tool('export')}.")
    try:
        loaded = tf.saved_model.load(model_dir)
    except (OSError, ValueError, tf.errors.OpError) as error:
        raise PredictError(f"Cannot load the SavedModel {model_dir}: "
                           f"{str(error).splitlines()[0]}") from None
    names = _class_names(loaded, model_dir)
    if CLASSIFY not in loaded.signatures or names is None:
        raise PredictError(f"The SavedModel {model_dir} has no {CLASSIFY} signature and class "
                           f"names; it was not written by {tool('export')}.")
    return loaded.signatures[CLASSIFY], names


def _class_names(loaded, model_dir):
    """The class names the SavedModel carries, else those of its export_info.json
    (list of str), else None."""
    if hasattr(loaded, "class_names"):
        return [name.decode("utf-8") for name in loaded.class_names.numpy()]
    try:
        with open(os.path.join(model_dir, EXPORT_INFO_FILE)) as f:
            names = json.load(f).get("class_names")
    except (OSError, ValueError, AttributeError):
        return None
    return [str(name) for name in names] if isinstance(names, list) else None


def predict(classify: Callable, images: Sequence[Array], batch_size: int,
            output: str = "probabilities") -> list[Array]:
    """float32 [C] probabilities (or another ``output`` of the signature ``classify``, such
    as embed's "embedding") of each uint8 [H, W, 3] image, in order; images of one size are
    batched together, ``batch_size`` per call."""
    import tensorflow as tf  # noqa: PLC0415

    by_shape = {}
    for position, image in enumerate(images):
        by_shape.setdefault(image.shape, []).append(position)
    probabilities = [None] * len(images)
    for positions in by_shape.values():
        for start in range(0, len(positions), batch_size):
            chunk = positions[start:start + batch_size]
            batch = np.stack([images[p] for p in chunk])
            result = classify(images=tf.constant(batch))[output].numpy()
            for p, row in zip(chunk, result):
                probabilities[p] = row
    return probabilities


def top_classes(probabilities: Array, class_names: Sequence[str],
                top: int) -> list[tuple[int, int, str, float]]:
    """[(rank, class number, name, probability)] of one image, best first (the lower class
    at a tie, as classify's top5)."""
    order = np.argsort(-probabilities, kind="stable")[:min(top, len(class_names))]
    return [(rank, int(c), class_names[c], float(probabilities[c]))
            for rank, c in enumerate(order, start=1)]


class ResultWriter:
    """Writes each image's top classes to ``stream`` in ``output_format``."""

    def __init__(self, stream: TextIO, output_format: str) -> None:
        self.stream, self.format = stream, output_format
        self._csv = csv.writer(stream, lineterminator="\n") if output_format == "csv" else None
        if self._csv:
            self._csv.writerow(CSV_HEADER)

    def write(self, path: str, ranked: Sequence[tuple[int, int, str, float]]) -> None:
        """``ranked``: from `top_classes`."""
        if self.format == "json":
            top = [{"rank": rank, "class": c, "name": name, "probability": probability}
                   for rank, c, name, probability in ranked]
            self.stream.write(json.dumps({"path": path, "top": top}) + "\n")
        elif self._csv:
            self._csv.writerows((path, *row) for row in ranked)
        else:
            width = max(len(name) for _, _, name, _ in ranked)
            self.stream.write("\n".join([path] + [
                f"  {rank}. {name:<{width}}  {probability:.4f}"
                for rank, _, name, probability in ranked]) + "\n")
        self.stream.flush()


def classify_files(paths: Sequence[str], classify: Callable, class_names: Sequence[str],
                   batch_size: int, top: int, writer: ResultWriter, stderr: TextIO) -> int:
    """Writes each image's ``top`` classes with ``writer`` in path order, each bad file as an
    error line on ``stderr``; returns the number of bad files."""
    failed = 0
    for start in range(0, len(paths), batch_size):
        images = {}
        for path in paths[start:start + batch_size]:
            try:
                images[path] = read_image(path)
            except PredictError as error:
                stderr.write(f"error: {error}\n")
                failed += 1
        found = predict(classify, list(images.values()), batch_size)
        for path, probabilities in zip(images, found):
            writer.write(path, top_classes(probabilities, class_names, top))
    return failed
