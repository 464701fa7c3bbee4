"""Classify images with a SavedModel written by tools/export.py.

  tools/predict.py --model_dir=runs/demo/export digit1.png digit2.jpg
  tools/predict.py --model_dir=runs/demo/export photos/ 'scans/*.png' --format=csv
  tools/predict.py --model_dir=/models/demo --images=a.png,b.png --top=3 --format=json

Prints, for each image, its top classes (names from the SavedModel) with
their probabilities, best first. Images are PNG, JPEG, GIF or BMP files of
any size, colour or grayscale; the SavedModel does the evaluation
preprocessing of training itself. Each argument is an image file, a
directory (its images, found recursively by their extension, in sorted
order) or a glob pattern the tool expands (quote it: 'imgs/*.png',
'imgs/**/*.jpg'; its matches in sorted order). A missing or undecodable
file, or a directory or pattern without images, gets its own "error:" line
on stderr while the other images are still classified; the exit status is
then 1. Needs only TensorFlow: this tool does not import llp_tf, so it runs
on a machine that has the SavedModel alone.

--format=text (the default) prints the path, then "rank. name
probability" lines. --format=json prints JSON Lines, one object per image:
{"path": ..., "top": [{"rank": 1, "class": 3, "name": "cat", "probability":
0.91}, ...]}. --format=csv prints a header "path,rank,class,name,probability"
and one row per image and rank.
"""

import csv
import glob
import json
import os
import re
import sys

from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)  # before anything imports TensorFlow

import numpy as np  # noqa: E402
from absl import flags  # noqa: E402

from llp_tf.cli import command_line  # noqa: E402

CLASSIFY = "classify"
SAVED_MODEL_FILE = "saved_model.pb"
EXPORT_INFO_FILE = "export_info.json"
DEFAULT_TOP = 5
# Images per call of the SavedModel: bounds memory for many large images.
DEFAULT_BATCH_SIZE = 32
# Channels the images are decoded to (grayscale repeated, alpha dropped), as
# the training pipeline decodes them.
DECODE_CHANNELS = 3
# What a directory or a pattern contributes: files with these extensions
# (any case); a file named on its own is read whatever its extension.
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".bmp")
FORMATS = ("text", "json", "csv")
CSV_HEADER = ("path", "rank", "class", "name", "probability")
GLOB_CHARACTERS = re.compile(r"[*?\[]")


# TensorFlow's op errors wrap their message in "{{function_node ...}}" and
# "[Op:...]" decorations that mean nothing to a user.
_OP_ERROR_DECORATION = re.compile(r"\{\{.*?\}\}\s*|\s*\[Op:.*$", re.S)


class PredictError(Exception):
    """Bad input: a missing or unusable model (the tool stops), or a missing or
    undecodable image (the tool reports it and goes on)."""


def make_flags():
    """The tool's flags, on their own `FlagValues` (not the global FLAGS, so
    that tests can run several tools' `main` in one process)."""
    values = command_line.new_flag_values()
    flags.DEFINE_string("model_dir", None, "SavedModel directory written by tools/export.py; "
                        "required.", flag_values=values)
    flags.DEFINE_list("images", [], "Comma-separated image files, directories (searched "
                      "recursively) or glob patterns; they may also be given as positional "
                      "arguments.", flag_values=values)
    flags.DEFINE_integer("top", DEFAULT_TOP, "Classes printed per image, best first (at most "
                         "the number of classes).", lower_bound=1, flag_values=values)
    flags.DEFINE_integer("batch_size", DEFAULT_BATCH_SIZE, "Images of the same size per call "
                         "of the model; also how many images are decoded at a time.",
                         lower_bound=1, flag_values=values)
    flags.DEFINE_enum("format", "text", list(FORMATS), "text: the path, then one line per "
                      "class; json: JSON Lines, one object per image (path, top: rank, class, "
                      "name, probability); csv: a header, then one row per image and rank.",
                      flag_values=values)
    return values


def _is_image_name(path):
    return path.lower().endswith(IMAGE_EXTENSIONS)


def _directory_images(directory):
    """The image files under ``directory``, recursively, sorted by path."""
    found = []
    for folder, _, files in os.walk(directory):
        found += [os.path.join(folder, name) for name in files if _is_image_name(name)]
    return sorted(found)


def expand_arguments(arguments):
    """The image paths of the arguments, in order, each once.

    Args:
      arguments: list of str, image files, directories or glob patterns.

    Returns:
      (paths, problems): the paths (a file named on its own is kept even if
      missing, for `read_image` to report), and one message per directory or
      pattern that holds no image.
    """
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


def read_image(path):
    """uint8 numpy array [H, W, 3] of an image file.

    Raises:
      PredictError: a missing or undecodable file, with a one-line reason.
    """
    import tensorflow as tf  # noqa: PLC0415 -- slow import, after the flags are checked

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


def load_model(model_dir):
    """(classify function, class names as a list of str) of an exported SavedModel.

    Raises:
      PredictError: not a SavedModel of tools/export.py.
    """
    import tensorflow as tf  # noqa: PLC0415

    if not os.path.isfile(os.path.join(model_dir, SAVED_MODEL_FILE)):
        raise PredictError(f"{model_dir} is not a SavedModel (it has no {SAVED_MODEL_FILE}); "
                           "give the --output_dir of tools/export.py.")
    try:
        loaded = tf.saved_model.load(model_dir)
    except (OSError, ValueError, tf.errors.OpError) as error:
        raise PredictError(f"Cannot load the SavedModel {model_dir}: "
                           f"{str(error).splitlines()[0]}") from None
    names = _class_names(loaded, model_dir)
    if CLASSIFY not in loaded.signatures or names is None:
        raise PredictError(f"The SavedModel {model_dir} has no {CLASSIFY} signature and class "
                           "names; it was not written by tools/export.py.")
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


def predict(classify, images, batch_size):
    """Class probabilities of every image.

    Images of the same size are batched together (a call takes one size).

    Args:
      classify: the SavedModel's classify signature.
      images: list of uint8 [H, W, 3] arrays.
      batch_size: int, images per call.

    Returns:
      list of float32 numpy arrays [C], in the order of ``images``.
    """
    import tensorflow as tf  # noqa: PLC0415

    by_shape = {}
    for position, image in enumerate(images):
        by_shape.setdefault(image.shape, []).append(position)
    probabilities = [None] * len(images)
    for positions in by_shape.values():
        for start in range(0, len(positions), batch_size):
            chunk = positions[start:start + batch_size]
            batch = np.stack([images[p] for p in chunk])
            result = classify(images=tf.constant(batch))["probabilities"].numpy()
            for p, row in zip(chunk, result):
                probabilities[p] = row
    return probabilities


def top_classes(probabilities, class_names, top):
    """[(rank, class number, name, probability)] of one image, best first.

    A stable sort keeps the lower class first at a tie, as classify's top5.
    Class numbers come from the position in ``probabilities`` (plain ints),
    whatever integer type the model's own class outputs use.
    """
    order = np.argsort(-probabilities, kind="stable")[:min(top, len(class_names))]
    return [(rank, int(c), class_names[c], float(probabilities[c]))
            for rank, c in enumerate(order, start=1)]


class ResultWriter:
    """Writes each image's top classes to ``stream`` in ``output_format``."""

    def __init__(self, stream, output_format):
        self.stream, self.format = stream, output_format
        self._csv = csv.writer(stream, lineterminator="\n") if output_format == "csv" else None
        if self._csv:
            self._csv.writerow(CSV_HEADER)

    def write(self, path, ranked):
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


def classify_files(paths, classify, class_names, values, writer, stderr):
    """Classifies ``paths`` ``values.batch_size`` at a time, writing each result
    with ``writer`` in path order and each bad file as an error line on
    ``stderr``; returns the number of bad files."""
    failed = 0
    for start in range(0, len(paths), values.batch_size):
        images = {}
        for path in paths[start:start + values.batch_size]:
            try:
                images[path] = read_image(path)
            except PredictError as error:
                stderr.write(f"error: {error}\n")
                failed += 1
        found = predict(classify, list(images.values()), values.batch_size)
        for path, probabilities in zip(images, found):
            writer.write(path, top_classes(probabilities, class_names, values.top))
    return failed


def main(argv=None, stdout=None, stderr=None):
    """Runs the tool on ``argv`` (sys.argv if None; argv[0] is the program name). Returns
    the exit code."""
    argv = sys.argv if argv is None else argv
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    values = make_flags()
    rest, exit_code = command_line.parse(values, argv, __doc__, stdout, stderr, positional=True)
    if exit_code is not None:
        return exit_code
    if not values.model_dir:
        stderr.write("error: give --model_dir, a SavedModel written by tools/export.py.\n")
        return 1
    arguments = list(values.images) + list(rest)
    if not arguments:
        stderr.write("error: give images (files, directories or patterns), as arguments or "
                     "with --images.\n")
        return 1
    if not os.path.isdir(values.model_dir):
        stderr.write(f"error: the model directory {values.model_dir} does not exist.\n")
        return 1
    try:
        classify, class_names = load_model(values.model_dir)
    except PredictError as error:
        stderr.write(f"error: {error}\n")
        return 1
    paths, problems = expand_arguments(arguments)
    for problem in problems:
        stderr.write(f"error: {problem}\n")
    failed = classify_files(paths, classify, class_names, values,
                            ResultWriter(stdout, values.format), stderr)
    return 1 if problems or failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
