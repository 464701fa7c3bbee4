"""Linear probe of a trained run's frozen trunk on another dataset (transfer).

  tools/linear_probe.py --run_dir=runs/demo --dataset=digits
  tools/linear_probe.py --run_dir=runs/r50_p10_q100 --dataset=places205:/data/places205 \\
      --cache_dir=/scratch/probe_cache --protocol=online

Caches the trunk's pooled features of the dataset (one centre crop per image; --cache_dir)
and trains a linear softmax readout with SGD, the rate x0.1 when val_top1 saturates;
--protocol=online trains it as the paper does, on freshly augmented images. A random trunk
of the same architecture is probed for contrast. Prints a table and writes the results as
JSON; accuracies are fractions.
"""

import os
import sys
from typing import Any, Sequence, TextIO

from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)

from absl import flags  # noqa: E402

from llp_tf import result_files  # noqa: E402
from llp_tf.cli import command_line  # noqa: E402

from llp_tf.after_training import run_loader  # noqa: E402
from llp_tf.after_training.features import DEFAULT_BATCH_SIZE  # noqa: E402
from llp_tf.after_training.probe import readout, trunk_probes  # noqa: E402
from llp_tf.counted_nouns import counted  # noqa: E402
from llp_tf.training import run_directory  # noqa: E402
from llp_tf.tool_names import tool  # noqa: E402

#: Keys of the results file that mark an earlier one, which --output replaces.
RESULT_KEYS = ("run_dir", "trained", "random")


def define_flags(flag_values: flags.FlagValues) -> None:
    """Defines the tool's flags on ``flag_values`` (its own `flags.FlagValues`,
    so tools that share flag names run in one process)."""
    def string(name, default, help_text):
        flags.DEFINE_string(name, default, help_text, flag_values=flag_values)

    def integer(name, default, help_text):
        flags.DEFINE_integer(name, default, help_text, flag_values=flag_values)

    def real(name, default, help_text):
        flags.DEFINE_float(name, default, help_text, flag_values=flag_values)

    def boolean(name, default, help_text):
        flags.DEFINE_boolean(name, default, help_text, flag_values=flag_values)

    command_line.define_run_dir(flag_values, "whose trunk is probed")
    command_line.define_checkpoint(flag_values)
    string("dataset", None, 'Probe dataset, with its own classes: "digits", "mnist5k" '
           '(embedded, offline), "tfds:<name>" (e.g. tfds:places365_small), '
           '"tfrecord:<folder>", "folder:<folder>", "list:<image root>?train=<list file>&'
           'validation=<list file>[&classes=<file>]" (lines "<path> <label>") or '
           '"places205:<folder>" (Places205 as distributed: images256/ and '
           'trainvalsplit_places205/). It needs train and validation splits.')
    command_line.define_data_dir(flag_values, "the probe dataset")
    integer("batch_size", DEFAULT_BATCH_SIZE, "Examples per SGD step of the "
            "readout, and images per forward pass of the feature extraction.")
    integer("epochs", readout.DEFAULT_EPOCHS, "Maximum epochs of readout training (passes "
            "over the training examples); the plateau rule usually stops it earlier.")
    define_protocol_flags(flag_values)
    real("learning_rate", readout.DEFAULT_LEARNING_RATE, "Initial SGD learning rate (the "
         "paper's 0.01).")
    real("momentum", readout.DEFAULT_MOMENTUM, "SGD momentum (the paper's network "
         "training used 0.9; it does not state the readout's).")
    integer("patience", readout.DEFAULT_PATIENCE, "Epochs without a new best validation "
            "top-1 before the learning rate drops x0.1 (after --max_drops drops: before "
            "training stops).")
    integer("max_drops", readout.DEFAULT_MAX_DROPS, "Most learning-rate drops (the "
            "paper's two).")
    integer("seed", 0, "Seed of the readout's batch order, of the --max_train_examples draw, "
            "of the online protocol's augmentation and of the random trunk.")
    boolean("standardize", False, "Standardise each feature by the training split's mean and "
            "standard deviation before the readout (streamed over the cache). Not in the "
            "paper, and --protocol=cached only; the readout stays linear, but SGD converges "
            "far faster, so the numbers depend less on how long it trains (recommended on "
            "small datasets and for the random-trunk contrast).")
    boolean("skip_random", False, "Skip the contrast probe on a randomly initialised trunk of "
            "the same architecture.")
    string("output", None, "JSON file of the results; default "
           "<run_dir>/linear_probe_<dataset>.json. Written atomically (write, then rename); "
           "an existing file is replaced only if it is an earlier probe's results.")


def define_protocol_flags(flag_values: flags.FlagValues) -> None:
    """Defines --protocol and the flags of the feature caches on ``flag_values``."""
    flags.DEFINE_enum(
        "protocol", "cached", list(readout.PROTOCOLS), "cached: train the readout on the "
        "features of one centre crop per training image, computed once into the cache (fast; "
        "no augmentation). online: the paper's protocol, every SGD step through the frozen "
        "trunk (batch norm in inference mode) on images augmented as in the run's training; "
        "one trunk pass per image per epoch. Validation uses the cached features of one "
        "centre crop either way.", flag_values=flag_values)
    flags.DEFINE_string(
        "cache_dir", None, "Folder of the feature caches (default <run_dir>/probe_cache); each "
        "probe keeps <dataset>/<trunk>-<split>/ there: features.npy (N x F float32, N x F x 4 "
        "bytes on disk), labels, index and manifest.json (the trunk's weights hash, dataset, "
        "split, image size, examples). Built under a .partial name and renamed when complete.",
        flag_values=flag_values)
    flags.DEFINE_boolean(
        "reuse_cache", True, "Reuse existing caches in --cache_dir; one made from other "
        "weights, data or --max_train_examples is an error naming the difference. "
        "--noreuse_cache rebuilds them, replacing only a cache (a folder of features.npy, "
        "labels.npy, index.npy and manifest.json, nothing else); another folder in its place "
        "is refused.", flag_values=flag_values)
    flags.DEFINE_integer(
        "max_train_examples", None, "Use at most this many training images, a uniform draw "
        "fixed by --seed, chosen before any image is read (a quicker or smaller probe, e.g. "
        "100000 of Places205's 2.45M); unset: all of them.", flag_values=flag_values)


def output_path(run_dir: str, dataset: str, output: str | None) -> str:
    """The results file, checked writable (and, if it exists, an earlier result,
    `RESULT_KEYS`) before any work is done."""
    from llp_tf.errors import ConfigError
    slug = trunk_probes.dataset_slug(dataset)
    path = output or os.path.join(run_dir, f"linear_probe_{slug}.json")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ConfigError(f"--output {path} is a directory; give a file name.")
    if not os.path.isdir(folder):
        try:
            os.makedirs(folder)
        except OSError as error:
            raise ConfigError(f"Cannot create the folder of --output {path}: {error}.") from None
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"Cannot write {path}: its folder is not writable; give another "
                          "--output.")
    result_files.check_result_file(path, RESULT_KEYS)
    return path


def probe_settings(options: flags.FlagValues) -> readout.ProbeSettings:
    """`ProbeSettings` of the parsed flags (ConfigError when they are invalid)."""
    from llp_tf.errors import ConfigError
    if not options.run_dir:
        raise ConfigError(f"Give --run_dir, the directory of a run made by {tool('train')}.")
    if not options.dataset:
        raise ConfigError("Give --dataset, the probe dataset (e.g. digits, mnist5k, "
                          "places205:/data/places205).")
    return readout.ProbeSettings(
        epochs=options.epochs, batch_size=options.batch_size, learning_rate=options.learning_rate,
        momentum=options.momentum, patience=options.patience, max_drops=options.max_drops,
        seed=options.seed, standardize=options.standardize, protocol=options.protocol,
        max_train_examples=options.max_train_examples)


def run_probe(options: flags.FlagValues, stream: TextIO) -> dict[str, Any]:
    """Does the work of `main` with parsed flags ``options``; returns the results
    dict written to --output."""
    from llp_tf.data.sources.registry import load_source
    settings = probe_settings(options)
    run_loader.read_config(options.run_dir)  # no run there: said before --output is made
    path = output_path(options.run_dir, options.dataset, options.output)
    source = load_source(options.dataset, options.data_dir)
    checkpoint = run_directory.resolve_checkpoint(options.run_dir, options.checkpoint)
    run = run_loader.load_run(options.run_dir, checkpoint, with_bank=False)
    info = source.info
    cache_dir = os.path.join(os.path.abspath(options.cache_dir or os.path.join(
        options.run_dir, "probe_cache")), trunk_probes.cache_folder_name(source.info))
    stream.write(f"Linear probe of {options.run_dir} ({os.path.basename(run.checkpoint)}) on "
                 f"{info.name}: {counted(info.num_classes, 'class')}, {info.num_train} train / "
                 f"{info.num_validation} validation images at {run.config.data.image_size} px; "
                 f"{settings.protocol} protocol, caches in {cache_dir}.\n")
    stream.flush()
    results, rows, facts = trunk_probes.probe_trunks(
        run, source, settings, cache_dir, stream, skip_random=options.skip_random,
        seed=options.seed, reuse_cache=options.reuse_cache)
    payload = trunk_probes.results(options.run_dir, run, info, settings, cache_dir, results,
                                   facts)
    result_files.write_json_atomically(path, payload, RESULT_KEYS)
    note = (f"(val_top5 is top-{rows[0][1].top5_k}: the dataset has "
            f"{counted(info.num_classes, 'class')})\n"
            if info.num_classes < readout.TOP_K else "")
    stream.write("\n" + trunk_probes.format_table(rows) + "\n" + note + f"Wrote {path}\n")
    stream.flush()
    return payload


def run(options: flags.FlagValues, stdout: TextIO, stderr: TextIO) -> int:
    """Runs the probe with parsed flags; returns the exit status (1: bad input)."""
    return command_line.exit_code_of(lambda: run_probe(options, stdout), stderr)


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Runs the tool on ``argv`` (default sys.argv); returns the exit code (2:
    unexpected arguments)."""
    argv = sys.argv if argv is None else argv
    options = command_line.new_flag_values()
    define_flags(options)
    command_line.define_verbosity(options)
    return command_line.run(argv, stdout, stderr, options, __doc__,
                            lambda values, out, err: run_probe(values, out), stray_exit_code=2)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
