"""Classify image files with a SavedModel written by tools/export.py.

  tools/predict.py --model_dir=runs/demo/export digit1.png digit2.jpg
  tools/predict.py --model_dir=/models/demo --images=a.png,b.png --top=3

Prints, for each image, its top classes (names from the SavedModel) with
their probabilities, best first. Images are PNG, JPEG, GIF or BMP files of
any size, colour or grayscale; the SavedModel does the evaluation
preprocessing of training itself. Needs only TensorFlow: this tool does not
import llp_tf, so it runs on a machine that has the SavedModel alone.
"""

import os
import re
import sys

import quiet_start  # noqa: E402 -- tools/ is on the path of a script run from it
quiet_start.import_tensorflow(sys.argv)  # before anything imports TensorFlow

import numpy as np  # noqa: E402
from absl import flags  # noqa: E402

import tool_cli  # noqa: E402 -- tools/ is on the path of a script run from it

CLASSIFY = "classify"
SAVED_MODEL_FILE = "saved_model.pb"
EXPORT_INFO_FILE = "export_info.json"
DEFAULT_TOP = 5
# Images per call of the SavedModel: bounds memory for many large images.
DEFAULT_BATCH_SIZE = 32
# Channels the images are decoded to (grayscale repeated, alpha dropped), as
# the training pipeline decodes them.
DECODE_CHANNELS = 3


# TensorFlow's op errors wrap their message in "{{function_node ...}}" and
# "[Op:...]" decorations that mean nothing to a user.
_OP_ERROR_DECORATION = re.compile(r"\{\{.*?\}\}\s*|\s*\[Op:.*$", re.S)


class PredictError(Exception):
    """Bad input: a missing model, an unreadable image."""


def make_flags():
    """The tool's flags, on their own `FlagValues` (not the global FLAGS, so
    that tests can run several tools' `main` in one process)."""
    values = tool_cli.new_flag_values()
    flags.DEFINE_string("model_dir", None, "SavedModel directory written by tools/export.py; "
                        "required.", flag_values=values)
    flags.DEFINE_list("images", [], "Comma-separated image files (PNG, JPEG, GIF, BMP); "
                      "image files may also be given as positional arguments.",
                      flag_values=values)
    flags.DEFINE_integer("top", DEFAULT_TOP, "Classes printed per image, best first (at most "
                         "the number of classes).", lower_bound=1, flag_values=values)
    flags.DEFINE_integer("batch_size", DEFAULT_BATCH_SIZE, "Images of the same size per call "
                         "of the model.", lower_bound=1, flag_values=values)
    return values


def read_images(paths):
    """Decodes image files.

    Args:
      paths: list of str.

    Returns:
      list of uint8 numpy arrays [H, W, 3], one per path.

    Raises:
      PredictError: naming every missing or undecodable file, one per line.
    """
    import tensorflow as tf  # noqa: PLC0415 -- slow import, after the flags are checked

    images, problems = [], []
    for path in paths:
        if not os.path.isfile(path):
            problems.append(f"{path}: no such image file")
            continue
        try:
            encoded = tf.io.read_file(path)
            images.append(tf.io.decode_image(encoded, channels=DECODE_CHANNELS,
                                             expand_animations=False).numpy())
        except tf.errors.OpError as error:
            reason = _OP_ERROR_DECORATION.sub("", error.message).strip()
            problems.append(f"{path}: cannot be read as a PNG, JPEG, GIF or BMP image "
                            f"({reason})")
    if problems:
        raise PredictError("\n".join(problems))
    return images


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
    if CLASSIFY not in loaded.signatures or not hasattr(loaded, "class_names"):
        raise PredictError(f"The SavedModel {model_dir} has no {CLASSIFY} signature and class "
                           "names; it was not written by tools/export.py.")
    names = [name.decode("utf-8") for name in loaded.class_names.numpy()]
    return loaded.signatures[CLASSIFY], names


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


def format_prediction(path, probabilities, class_names, top):
    """Lines of one image's top classes: the path, then ``rank. name  probability``."""
    # A stable sort keeps the lower class first at a tie, as classify's top5.
    order = np.argsort(-probabilities, kind="stable")[:min(top, len(class_names))]
    width = max(len(class_names[c]) for c in order)
    return [path] + [f"  {rank}. {class_names[c]:<{width}}  {probabilities[c]:.4f}"
                     for rank, c in enumerate(order, start=1)]


def main(argv, stdout=None, stderr=None):
    """Runs the tool; argv[0] is the program name. Returns the exit code."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    values = make_flags()
    rest, exit_code = tool_cli.parse(values, argv, __doc__, stdout, stderr, positional=True)
    if exit_code is not None:
        return exit_code
    if not values.model_dir:
        stderr.write("error: give --model_dir, a SavedModel written by tools/export.py.\n")
        return 1
    paths = list(values.images) + list(rest)
    if not paths:
        stderr.write("error: give image files, as arguments or with --images.\n")
        return 1
    if not os.path.isdir(values.model_dir):
        stderr.write(f"error: the model directory {values.model_dir} does not exist.\n")
        return 1
    try:
        images = read_images(paths)
        classify, class_names = load_model(values.model_dir)
        probabilities = predict(classify, images, values.batch_size)
    except PredictError as error:
        for line in str(error).splitlines():
            stderr.write(f"error: {line}\n")
        return 1
    for path, row in zip(paths, probabilities):
        stdout.write("\n".join(format_prediction(path, row, class_names, values.top)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
