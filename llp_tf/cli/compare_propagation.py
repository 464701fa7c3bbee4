"""Compare LLP's label propagation with other propagation methods (paper Table 5).

  tools/compare_propagation.py --run_dir=runs/demo --classes=10
  tools/compare_propagation.py --run_dir=runs/r50_p10_q100        # 50 x 50, 5 labelled
  tools/compare_propagation.py --run_dir=runs/demo_supervised --embed_split=validation --classes=10
  tools/compare_propagation.py --features=feats.npy --labels=labels.npy

Draws --draws subsets of --classes classes x --images_per_class embeddings (a run's memory
bank, a split it embeds, or a features file), keeps --labelled_per_class labels per class,
propagates them with LLP and four other methods, and prints each one's accuracy on the
rest (mean and std over the draws) next to the paper's Table 5; results go to a JSON file.
"""

import os
import sys
from typing import Sequence, TextIO

from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)

from absl import flags  # noqa: E402

from llp_tf import result_files  # noqa: E402
from llp_tf.cli import command_line  # noqa: E402

from llp_tf.after_training.transduction import embeddings, report  # noqa: E402 -- no TF
from llp_tf.after_training.transduction import protocol as protocol_lib  # noqa: E402 -- no TF
from llp_tf.core import hyperparameters  # noqa: E402 -- no TensorFlow
from llp_tf.counted_nouns import counted  # noqa: E402
from llp_tf.tensor_types import Array  # noqa: E402
from llp_tf.training.config import TrainConfig  # noqa: E402 -- no TensorFlow

OUTPUT_NAME = "propagation_comparison.json"
#: Keys of the results file that mark an earlier one, which --output replaces.
RESULT_KEYS = ("methods", "paper_table5_unmatched")


def make_flags() -> flags.FlagValues:
    """The tool's own `flags.FlagValues`."""
    values = command_line.new_flag_values()
    command_line.define_run_dir(values, "whose embeddings are compared: its memory bank by "
                                "default (scored with the dataset's true training labels of the "
                                "bank rows), or see --embed_split")
    command_line.define_checkpoint(values)
    flags.DEFINE_enum("embed_split", None, ["train", "validation"], "Instead of the memory bank, "
                      "embed this split's images with the run's model (eval preprocessing) and "
                      "use their true labels; needed for supervised runs, which have no bank.",
                      flag_values=values)
    command_line.define_data_dir(values, "the run's dataset, if not where the run's config says "
                                 "(used for the true labels and --embed_split)")
    flags.DEFINE_integer("batch_size", 256, "Images per batch with --embed_split.",
                         flag_values=values)
    flags.DEFINE_string("features", None, "A .npy file of features float [N, D] (rows are "
                        "L2-normalised before use); needs --labels. Alternative to --run_dir.",
                        flag_values=values)
    flags.DEFINE_string("labels", None, "A .npy file of the true integer classes [N] of "
                        "--features.", flag_values=values)
    flags.DEFINE_integer("classes", protocol_lib.PAPER_CLASSES, "S: classes per draw (the "
                         "paper's 50). Left at its default, it is lowered to the classes "
                         "available, with a note.", flag_values=values)
    flags.DEFINE_integer("images_per_class", protocol_lib.PAPER_IMAGES_PER_CLASS, "I: images drawn "
                         "per class (the paper's 50).", flag_values=values)
    flags.DEFINE_integer("labelled_per_class", protocol_lib.PAPER_LABELLED_PER_CLASS, "L: drawn "
                         "images per class whose label is kept (the paper's 5); the other I - L "
                         "are scored.", flag_values=values)
    flags.DEFINE_integer("draws", protocol_lib.PAPER_DRAWS, "R: random subsets drawn (the "
                         "paper's 10).", flag_values=values)
    flags.DEFINE_integer("seed", 0, "Seed of the draws; the same seed draws the same subsets.",
                         flag_values=values)
    flags.DEFINE_integer("k", None, "K: labelled neighbours voting in LLP and the weighted kNN "
                         "(default: the run's setting, else the paper's 10).", flag_values=values)
    flags.DEFINE_integer("t", None, "T: neighbours in LLP's local density, taken within each "
                         "draw (default: the run's setting, else the paper's 25).",
                         flag_values=values)
    flags.DEFINE_float("temperature", None, "tau of LLP and the kNN; label spreading and label "
                       "propagation use the RBF kernel exp(-||a-b||^2 / (2 tau)), the same "
                       "similarity scale (default: the run's setting, else the paper's 0.07).",
                       flag_values=values)
    flags.DEFINE_string("output", None, "JSON file of the results (default: "
                        f"<run_dir>/{OUTPUT_NAME}, or <features>_{OUTPUT_NAME} next to "
                        "--features); an existing file is replaced only if it is an earlier "
                        "comparison's results.", flag_values=values)
    command_line.define_verbosity(values)
    return values


def _fail(message):
    from llp_tf.errors import ConfigError
    raise ConfigError(message)


def default_output(run_dir: str | None, features_path: str | None) -> str:
    """The results file: in the run directory, else beside the features file."""
    if run_dir is not None:
        return os.path.join(run_dir, OUTPUT_NAME)
    return f"{os.path.splitext(features_path)[0]}_{OUTPUT_NAME}"


def read_embeddings(options: flags.FlagValues, stream: TextIO
                    ) -> tuple[Array, Array, dict, TrainConfig | None]:
    """(features [N, D], labels int64 [N], description dict, run config or None)
    from --run_dir or --features, after the checks that need no data."""
    if (options.run_dir is None) == (options.features is None):
        _fail("Give either --run_dir (a training run) or --features with --labels.")
    if options.features is not None and options.labels is None:
        _fail("--features needs --labels, the true class of each feature row.")
    if options.features is not None and options.embed_split is not None:
        _fail("--embed_split applies to --run_dir only.")
    if options.run_dir is not None and not os.path.isdir(options.run_dir):
        _fail(f"--run_dir {options.run_dir} is not a directory.")
    if options.batch_size < 1:
        _fail(f"--batch_size must be positive, got {options.batch_size}.")
    if options.run_dir is not None:
        return embeddings.features_from_run(options.run_dir, options.checkpoint,
                                            options.embed_split, options.data_dir,
                                            options.batch_size, stream)
    return embeddings.features_from_files(options.features, options.labels) + (None,)


def classes_per_draw(options: flags.FlagValues, labels: Array, stream: TextIO) -> int:
    """S: --classes, lowered to the classes present when left at its default."""
    import numpy as np
    available = len(np.unique(labels))
    return command_line.default_at_most(options, "classes", available, stream,
                                        f"the labels have {counted(available, 'class')}")


def run_comparison(options: flags.FlagValues,
                   stream: TextIO = sys.stdout) -> protocol_lib.Comparison:
    """Reads the embeddings, runs the comparison, prints and writes the results.

    Returns the `transduction.protocol.Comparison`.
    """
    features, labels, source, config = read_embeddings(options, stream)
    num_classes = classes_per_draw(options, labels, stream)
    images, labelled, draws = options.images_per_class, options.labelled_per_class, options.draws
    protocol_lib.check_protocol(labels, num_classes, images, labelled, draws)
    # Imported once the input is known to be usable: it loads TensorFlow.
    from llp_tf.after_training.transduction import methods
    from llp_tf.training.methods import method_class

    # Unset propagation flags take a bank run's own settings, else the paper's.
    defaults = {"k": hyperparameters.K, "t": hyperparameters.T,
                "temperature": hyperparameters.TEMPERATURE}
    if config is not None and method_class(config.method.name).keeps_bank:
        method = config.method_settings
        defaults = {"k": method.k, "t": method.t, "temperature": method.temperature}
    k, t, temperature = (options[name].value if options[name].value is not None else defaults[name]
                         for name in ("k", "t", "temperature"))
    protocol = {"classes": int(num_classes), "images_per_class": images,
                "labelled_per_class": labelled, "draws": draws, "seed": options.seed,
                "feature_rows": int(len(labels)), "feature_dim": int(features.shape[1])}
    settings = report.method_settings(methods, k, t, temperature)
    output = options.output or default_output(options.run_dir, options.features)
    result_files.check_result_file(output, RESULT_KEYS)

    comparison = report.run_and_report(features, labels, source, num_classes, images, labelled,
                                       draws, options.seed, k, t, temperature, stream)
    result_files.write_json_atomically(
        output, report.results_json(comparison, protocol, settings, source), RESULT_KEYS)
    stream.write(f"wrote {output}\n")
    return comparison


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Runs the tool on ``argv`` (default sys.argv); returns the exit code (2:
    unexpected arguments)."""
    argv = sys.argv if argv is None else argv
    return command_line.run(argv, stdout, stderr, make_flags(), __doc__,
                            lambda options, out, err: run_comparison(options, out),
                            stray_exit_code=2)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
