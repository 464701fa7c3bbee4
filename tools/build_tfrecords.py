"""Writes an image folder as TFRecord shards in the authors' format.

  python tools/build_tfrecords.py --train_dir=IMAGES/train \
      --validation_dir=IMAGES/val --output_dir=TFRECORDS

Each folder holds one sub-folder per class. Training images are numbered in
a seeded permutation (seed 0, as the release) and written in that order;
see llp_tf/data/tfrecord_builder.py. Read the result with
--dataset=tfrecord:TFRECORDS.
"""

import sys

from absl import app, flags  # noqa: E402

from llp_tf.errors import LLPError  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("train_dir", None, "Folder of class sub-folders of training images.")
flags.DEFINE_string("validation_dir", None,
                    "Optional folder of class sub-folders of validation images.")
flags.DEFINE_string("output_dir", None, "Folder to write the shards into (must hold none yet).")
flags.DEFINE_integer("train_shards", 1024, "Number of train-* shards (the release used 1024).")
flags.DEFINE_integer("validation_shards", 128,
                     "Number of validation-* shards (the release used 128).")
flags.DEFINE_integer("seed", 0, "Seed of the permutation that numbers the training images.")
flags.DEFINE_integer("num_threads", None, "Images encoded in parallel (default: CPU count).")
flags.mark_flags_as_required(["train_dir", "output_dir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    from llp_tf.data.tfrecord_builder import build_tfrecords  # noqa: PLC0415 -- imports TF

    try:
        summary = build_tfrecords(
            FLAGS.train_dir, FLAGS.output_dir, validation_dir=FLAGS.validation_dir,
            train_shards=FLAGS.train_shards, validation_shards=FLAGS.validation_shards,
            seed=FLAGS.seed, num_threads=FLAGS.num_threads)
    except LLPError as error:
        print(f"build_tfrecords: {error}", file=sys.stderr)
        sys.exit(1)
    print(f"{summary['num_train']} training and {summary['num_validation']} validation images "
          f"of {summary['num_classes']} classes in {summary['train_shards']} + "
          f"{summary['validation_shards']} shards in {FLAGS.output_dir}")


if __name__ == "__main__":
    app.run(main)
