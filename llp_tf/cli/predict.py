"""Classify images with a SavedModel written by tools/export.py.

  tools/predict.py --model_dir=runs/demo/export digit1.png digit2.jpg
  tools/predict.py --model_dir=runs/demo/export photos/ 'scans/*.png' --format=csv
  tools/predict.py --model_dir=/models/demo --images=a.png,b.png --top=3 --format=json

Prints each image's top classes with their probabilities, best first (or JSON Lines, or
CSV). Arguments are PNG, JPEG, GIF or BMP files of any size, directories (their images
found recursively) or glob patterns (quote them). A bad file gets its own "error:" line on
stderr while the others are still classified; the exit status is then 1. Needs only
TensorFlow and llp_tf.
"""

import os
import sys
from typing import Sequence, TextIO

from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)

from absl import flags  # noqa: E402

from llp_tf.after_training.predict import (  # noqa: E402
    DEFAULT_BATCH_SIZE, DEFAULT_TOP, FORMATS, PredictError, ResultWriter, classify_files,
    expand_arguments, load_model)
from llp_tf.cli import command_line  # noqa: E402
from llp_tf.tool_names import tool  # noqa: E402


def make_flags() -> flags.FlagValues:
    """The tool's `flags.FlagValues`."""
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


def predict(values: flags.FlagValues, arguments: Sequence[str], stdout: TextIO,
            stderr: TextIO) -> command_line.ExitCode:
    """Classifies the images of --images and ``arguments`` as the flags say; `ExitCode` 1
    after a bad input or a file that could not be classified."""
    if not values.model_dir:
        stderr.write(f"error: give --model_dir, a SavedModel written by {tool('export')}.\n")
        return command_line.ExitCode(1)
    arguments = list(values.images) + list(arguments)
    if not arguments:
        stderr.write("error: give images (files, directories or patterns), as arguments or "
                     "with --images.\n")
        return command_line.ExitCode(1)
    if not os.path.isdir(values.model_dir):
        stderr.write(f"error: the model directory {values.model_dir} does not exist.\n")
        return command_line.ExitCode(1)
    try:
        classify, class_names = load_model(values.model_dir)
    except PredictError as error:
        stderr.write(f"error: {error}\n")
        return command_line.ExitCode(1)
    paths, problems = expand_arguments(arguments)
    for problem in problems:
        stderr.write(f"error: {problem}\n")
    failed = classify_files(paths, classify, class_names, values.batch_size, values.top,
                            ResultWriter(stdout, values.format), stderr)
    return command_line.ExitCode(1 if problems or failed else 0)


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Runs the tool on ``argv`` (default sys.argv); returns the exit code."""
    argv = sys.argv if argv is None else argv
    return command_line.run(argv, stdout, stderr, make_flags(), __doc__, predict, origins=None,
                            arguments=command_line.POSITIONAL)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
