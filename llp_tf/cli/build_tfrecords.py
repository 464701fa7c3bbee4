"""Writes an image folder, or list files of images, as TFRecord shards in the
authors' format.

  python tools/build_tfrecords.py --train_dir=IMAGES/train \
      --validation_dir=IMAGES/val --output_dir=TFRECORDS
  python tools/build_tfrecords.py --dataset=places205:PLACES205 --output_dir=TFRECORDS
  python tools/build_tfrecords.py --output_dir=TFRECORDS \
      --dataset='list:IMAGES?train=train.txt&validation=val.txt'

Each folder holds one sub-folder per class; --dataset takes folder:, list: or places205:
instead. Training images are numbered in a seeded permutation (seed 0, as the release).
Read the result with --dataset=tfrecord:TFRECORDS.
"""

import sys
from typing import Sequence, TextIO

from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)

from absl import flags  # noqa: E402

from llp_tf.cli import command_line  # noqa: E402


def make_flags() -> flags.FlagValues:
    """The tool's `flags.FlagValues`."""
    values = command_line.new_flag_values()
    flags.DEFINE_string("train_dir", None, "Folder of class sub-folders of training images "
                        "(or give --dataset).", flag_values=values)
    flags.DEFINE_string("dataset", None, 'Instead of --train_dir/--validation_dir: a dataset '
                        'of image files, "folder:<folder>", "list:<image root>?train=<list '
                        'file>[&validation=<list file>][&classes=<file>][&check_files=no]" or '
                        '"places205:<folder as distributed>".', flag_values=values)
    flags.DEFINE_string("validation_dir", None, "Optional folder of class sub-folders of "
                        "validation images.", flag_values=values)
    flags.DEFINE_string("output_dir", None, "Folder to write the shards and dataset_info.json "
                        "into (must hold none yet; nothing there is replaced).",
                        flag_values=values)
    flags.DEFINE_integer("train_shards", 1024, "Number of train-* shards (the release used "
                         "1024).", flag_values=values)
    flags.DEFINE_integer("validation_shards", 128, "Number of validation-* shards (the release "
                         "used 128).", flag_values=values)
    flags.DEFINE_integer("seed", 0, "Seed of the permutation that numbers the training images.",
                         flag_values=values)
    flags.DEFINE_integer("num_threads", None, "Images encoded in parallel (default: CPU count).",
                         flag_values=values)
    flags.mark_flags_as_required(["output_dir"], flag_values=values)
    command_line.define_verbosity(values)
    return values


def build(values: flags.FlagValues, stdout: TextIO, stderr: TextIO) -> None:
    """Builds the shards and prints what was written."""
    from llp_tf.counted_nouns import counted  # noqa: PLC0415
    from llp_tf.data.sources import tfrecord_builder  # noqa: PLC0415 -- imports TF
    from llp_tf.data.sources.registry import load_source  # noqa: PLC0415 -- imports TF
    from llp_tf.errors import ConfigError  # noqa: PLC0415

    if (values.train_dir is None) == (values.dataset is None):
        raise ConfigError("Give either --train_dir or --dataset, not both (nor neither).")
    if values.dataset is not None and values.validation_dir is not None:
        raise ConfigError("--validation_dir goes with --train_dir; with --dataset the "
                          "validation split is the dataset's own.")
    settings = dict(train_shards=values.train_shards, validation_shards=values.validation_shards,
                    seed=values.seed, num_threads=values.num_threads)
    if values.dataset is not None:
        summary = tfrecord_builder.build_tfrecords_from_source(
            load_source(values.dataset), values.output_dir, **settings)
    else:
        summary = tfrecord_builder.build_tfrecords(
            values.train_dir, values.output_dir, validation_dir=values.validation_dir,
            **settings)
    stdout.write(f"{summary['num_train']} training and {summary['num_validation']} "
                 f"validation images of {counted(summary['num_classes'], 'class')} in "
                 f"{summary['train_shards']} + {summary['validation_shards']} shards in "
                 f"{values.output_dir}\n")


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Runs the tool on ``argv`` (default sys.argv); returns the exit code."""
    argv = sys.argv if argv is None else argv
    return command_line.run(argv, stdout, stderr, make_flags(), __doc__, build,
                            error_prefix="build_tfrecords: ")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
