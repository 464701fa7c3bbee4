"""Writes the split file of a regime: labelled and used training examples.

  python tools/make_splits.py --dataset=tfrecord:/data/imagenet \
      --label_percent=10 --data_percent=100 --output=splits/p10_q100.npz
  python tools/make_splits.py --dataset=tfds:imagenet2012 --data_dir=/data/tfds \
      --label_subset=1percent --output=splits/imagenet_1percent.npz

Per class, round(label_percent% of its examples) are labelled: the lowest indices (the
release's rule) or, with --split_seed, a seeded draw; the used subset (data_percent%)
contains them. --label_subset labels the images a list names (ImageNet's 1% and 10%).
"""

import os
import sys
from typing import Sequence, TextIO

from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)

from absl import flags  # noqa: E402

from llp_tf.cli import command_line  # noqa: E402


def make_flags() -> flags.FlagValues:
    """The tool's `flags.FlagValues`."""
    values = command_line.new_flag_values()
    flags.DEFINE_string("dataset", None, 'Dataset name: "mnist5k", "digits", "tfds:<name>", '
                        '"tfrecord:<folder>", "folder:<folder>", "list:<image root>?train=<list '
                        'file>[&validation=<list file>][&classes=<file>]" or '
                        '"places205:<folder>".', flag_values=values)
    command_line.define_data_dir(values)
    flags.DEFINE_float("label_percent", None, "Percentage of each class that is labelled (PP); "
                       "required unless --label_subset is given.", flag_values=values)
    flags.DEFINE_string("label_subset", None, "Label exactly the training images this list "
                        "names (one file name per line), or 1percent / 10percent for ImageNet's "
                        "published subsets (fetched once through TFDS into "
                        "<data_dir>/downloads).", flag_values=values)
    flags.DEFINE_float("data_percent", 100.0, "Percentage of each class that is used "
                       "(QQ >= PP).", flag_values=values)
    flags.DEFINE_string("exclude_list", None, "File naming examples to leave out of both sets "
                        "(tools/check_data.py --write_exclude_list writes one); recorded in "
                        "the split file.", flag_values=values)
    flags.DEFINE_integer("split_seed", None, "Seed of a random draw (train.py's --split_seed); "
                         "unset: lowest indices per class, as the release.", flag_values=values)
    flags.DEFINE_string("output", None, "Split file to write (.npz). An existing file is "
                        "replaced only if it is a split file outside a training run's "
                        "directory; anything else is refused.", flag_values=values)
    flags.mark_flags_as_required(["dataset", "output"], flag_values=values)
    command_line.define_verbosity(values)
    return values


def check_output(path: str) -> None:
    """Raises ConfigError unless the split file may be written to ``path``: it
    does not exist, or it is a split file (an earlier one of this tool) and not
    the split.npz of a training run (`RunDirectory.holds_settings`)."""
    from llp_tf.data.splits import regime  # noqa: PLC0415
    from llp_tf.errors import ConfigError, DataError  # noqa: PLC0415
    from llp_tf.training.run_directory import SPLIT_FILE, RunDirectory  # noqa: PLC0415
    if not os.path.lexists(path):
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.basename(path) == SPLIT_FILE and RunDirectory(folder).holds_settings():
        raise ConfigError(f"{path} is the split of the training run in {folder}, so it is not "
                          "replaced: give another --output.")
    try:
        regime.read_split_header(path)
    except DataError:
        raise ConfigError(f"{path} exists and is not a split file, so it is not replaced: give "
                          "another --output.") from None


def make(values: flags.FlagValues, stderr: TextIO) -> str:
    """Draws and writes the split; returns its description."""
    from llp_tf.counted_nouns import counted  # noqa: PLC0415
    from llp_tf.data.sources.registry import load_source  # noqa: PLC0415
    from llp_tf.data.splits import exclusions, label_subsets, regime  # noqa: PLC0415
    from llp_tf.errors import ConfigError  # noqa: PLC0415

    if (values.label_percent is None) == (values.label_subset is None):
        raise ConfigError("Give --label_percent or --label_subset (exactly one).")
    check_output(values.output)
    source = load_source(values.dataset, values.data_dir)
    labels = source.train_labels()
    excluded = exclusions.load(values.exclude_list, source)
    made_from = {"label_subset": None, "exclude_list": excluded.record()}
    warning = regime.absent_classes_warning(labels, source.info.num_classes)
    if warning:
        stderr.write(warning + "\n")
    if values.label_subset:
        labelled_index, used_index, path = label_subsets.make_subset_splits(
            source, values.label_subset, values.data_percent, values.split_seed, values.data_dir,
            excluded.train)
        made_from["label_subset"] = label_subsets.list_record(values.label_subset, path)
    else:
        labelled_index, used_index = regime.make_splits(
            labels, values.label_percent, values.data_percent, values.split_seed,
            num_classes=source.info.num_classes, excluded=excluded.train)
    regime.save_splits(values.output, labelled_index, used_index, labels,
                       dataset_name=source.info.name, label_percent=values.label_percent,
                       data_percent=values.data_percent, seed=values.split_seed,
                       made_from=made_from,
                       excluded={"train": excluded.train, "validation": excluded.validation})
    return (f"{values.output}: {labelled_index.size} labelled and {used_index.size} used of "
            f"{counted(labels.size, 'training example')} of {source.info.name}")


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Runs the tool on ``argv`` (default sys.argv); returns the exit code."""
    argv = sys.argv if argv is None else argv
    return command_line.run(argv, stdout, stderr, make_flags(), __doc__,
                            lambda values, out, err: out.write(make(values, err) + "\n"),
                            error_prefix="make_splits: ")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
