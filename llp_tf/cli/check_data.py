"""Decodes every image of a dataset, training and validation, and names the bad ones.

  python tools/check_data.py --dataset=folder:/data/imagenet
  python tools/check_data.py --dataset=tfrecord:/data/imagenet \
      --write_exclude_list=bad.txt

Every image is decoded with the decoders training uses; each one that fails is printed
with its split, example index and file or record, and the exit code is then 1.
--write_exclude_list writes them as an exclude list for a new run's --exclude_list (a run
that already trained resumes only with its own exclusions).
"""

import os
import sys
from typing import Sequence, TextIO
import time

from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)

from absl import flags  # noqa: E402

from llp_tf.cli import command_line  # noqa: E402

BAD_EXIT_CODE = 1


def make_flags() -> flags.FlagValues:
    """The tool's `flags.FlagValues`."""
    values = command_line.new_flag_values()
    flags.DEFINE_string("dataset", None, 'Dataset name: "mnist5k", "digits", "tfds:<name>", '
                        '"tfrecord:<folder>", "folder:<folder>", "list:<image root>?train=<list '
                        'file>[&validation=<list file>][&classes=<file>]" or '
                        '"places205:<folder>"; the same as training\'s --dataset.',
                        flag_values=values)
    command_line.define_data_dir(values)
    flags.DEFINE_string("write_exclude_list", None, "Write the bad examples to this file as an "
                        "exclude list for training's --exclude_list (written even when there "
                        "are none). An existing file is replaced only if this tool wrote it; "
                        "a list written by hand, or any other file, is refused.",
                        flag_values=values)
    flags.mark_flags_as_required(["dataset"], flag_values=values)
    command_line.define_verbosity(values)
    return values


def _check_split(source, split, stdout):
    """The `image_check.BadImage`s of ``split``, with a progress bar on ``stdout``."""
    from llp_tf.data.splits import image_check  # noqa: PLC0415 -- imports TensorFlow
    from llp_tf.training.progress import EpochProgress  # noqa: PLC0415

    progress = EpochProgress(f"checking {split}", source.info.num_examples(split),
                             images_per_step=1, stream=stdout)
    return image_check.find_bad_images(
        source, split, on_progress=lambda done, bad: progress.update(done, {"bad": bad}))


def check(values: flags.FlagValues, stdout: TextIO) -> command_line.ExitCode | None:
    """Checks the dataset; returns the tool's exit code."""
    from llp_tf.counted_nouns import counted  # noqa: PLC0415
    from llp_tf.data.sources.base import SPLITS  # noqa: PLC0415
    from llp_tf.data.sources.registry import load_source  # noqa: PLC0415
    from llp_tf.data.splits import exclusions  # noqa: PLC0415

    from llp_tf.errors import ConfigError  # noqa: PLC0415

    listed = values.write_exclude_list
    if listed and os.path.lexists(listed) and not exclusions.is_written_list(listed):
        raise ConfigError(f"{listed} exists and is not an exclude list this tool wrote, so it is "
                          "not replaced: give another --write_exclude_list.")
    start = time.monotonic()
    source = load_source(values.dataset, values.data_dir)
    bad, counts = [], {}
    for split in SPLITS:
        counts[split] = source.info.num_examples(split)
        if counts[split]:
            found = _check_split(source, split, stdout)
            for image in found:
                stdout.write(f"bad: {split} example {image.index}: {image.where}\n")
            bad += found
    seconds = time.monotonic() - start
    checked = sum(counts.values())
    stdout.write(f"{source.info.name}: checked {counts['train']} training and "
                 f"{counts['validation']} validation images in {seconds:.1f} s "
                 f"({checked / max(seconds, 1e-9):.0f} images/s); "
                 f"{f'{len(bad)} cannot be read or decoded' if bad else 'all read and decode'}."
                 "\n")
    if values.write_exclude_list:
        text = exclusions.format_exclude_list(
            ((b.split, b.index, b.where) for b in bad), source.info.name)
        with open(values.write_exclude_list, "w", encoding="utf-8") as f:
            f.write(text)
        stdout.write(f"Wrote {counted(len(bad), 'example')} to the exclude list "
                     f"{values.write_exclude_list}; a new run given "
                     f"--exclude_list={values.write_exclude_list} leaves them out.\n")
    return command_line.ExitCode(BAD_EXIT_CODE) if bad else None


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Runs the tool on ``argv`` (default sys.argv); returns the exit code (1: a bad
    image, or an error)."""
    argv = sys.argv if argv is None else argv
    return command_line.run(argv, stdout, stderr, make_flags(), __doc__,
                            lambda values, out, err: check(values, out),
                            error_prefix="check_data: ")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
