"""Writes the split file of a regime: labelled and used training examples.

  python tools/make_splits.py --dataset=tfrecord:/data/imagenet \
      --label_percent=10 --data_percent=100 --output=splits/p10_q100.npz
  python tools/make_splits.py --dataset=tfds:imagenet2012 --data_dir=/data/tfds \
      --label_subset=1percent --output=splits/imagenet_1percent.npz

Per class, round(label_percent% of its examples) are labelled: the lowest
indices (the release's rule) or, with --seed, a seeded draw; the used subset
(data_percent%) contains them. With --label_subset the labelled examples are
the images a list names (ImageNet's standard 1% and 10% subsets). Classes
with no training example are skipped with a warning. See
llp_tf/data/splits.py and llp_tf/data/label_subsets.py. A run copies the
split file into its run directory and never re-draws it.
"""

import sys

from absl import app, flags  # noqa: E402

from llp_tf.errors import LLPError  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("dataset", None, 'Dataset name: "mnist5k", "digits", "tfds:<name>", '
                    '"tfrecord:<folder>" or "folder:<folder>".')
flags.DEFINE_string("data_dir", None, "Data folder for TFDS and embedded datasets (TFDS's "
                    "default when unset); relative tfrecord:/folder: paths are taken from it.")
flags.DEFINE_float("label_percent", None, "Percentage of each class that is labelled (PP); "
                   "required unless --label_subset is given.")
flags.DEFINE_string("label_subset", None, "Label exactly the training images this list "
                    "names (one file name per line), or 1percent / 10percent for ImageNet's "
                    "published subsets (fetched once through TFDS into <data_dir>/downloads).")
flags.DEFINE_float("data_percent", 100.0, "Percentage of each class that is used (QQ >= PP).")
flags.DEFINE_integer("seed", None, "Seed of a random draw; unset: lowest indices per class, "
                     "as the release.")
flags.DEFINE_string("output", None, "Split file to write (.npz).")
flags.mark_flags_as_required(["dataset", "output"])


def make(stderr=sys.stderr):
    """Draws and writes the split; returns its description."""
    from llp_tf.data import label_subsets, load_source, splits  # noqa: PLC0415 -- imports TF
    from llp_tf.errors import ConfigError  # noqa: PLC0415

    if (FLAGS.label_percent is None) == (FLAGS.label_subset is None):
        raise ConfigError("Give --label_percent or --label_subset (exactly one).")
    source = load_source(FLAGS.dataset, FLAGS.data_dir)
    labels = source.train_labels()
    warning = splits.absent_classes_warning(labels, source.info.num_classes)
    if warning:
        stderr.write(warning + "\n")
    if FLAGS.label_subset:
        labeled_index, used_index, _ = label_subsets.make_subset_splits(
            source, FLAGS.label_subset, FLAGS.data_percent, FLAGS.seed, FLAGS.data_dir)
    else:
        labeled_index, used_index = splits.make_splits(
            labels, FLAGS.label_percent, FLAGS.data_percent, FLAGS.seed,
            num_classes=source.info.num_classes)
    splits.save_splits(FLAGS.output, labeled_index, used_index, labels,
                       dataset_name=source.info.name, label_percent=FLAGS.label_percent,
                       data_percent=FLAGS.data_percent, seed=FLAGS.seed)
    return (f"{FLAGS.output}: {labeled_index.size} labelled and {used_index.size} used of "
            f"{labels.size} training examples of {source.info.name}")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    try:
        print(make())
    except LLPError as error:
        print(f"make_splits: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
