"""Test the paper's Table 5 claims: LLP's label propagation against five other methods.

  tools/compare_propagation.py --run_dir=runs/demo
  tools/compare_propagation.py --run_dir=runs/r50_p10_q100        # 50 x 50, 5 labelled
  tools/compare_propagation.py --run_dir=runs/demo_supervised --embed_split=validation
  tools/compare_propagation.py --features=feats.npy --labels=labels.npy

Draws --draws subsets of --classes classes x --images_per_class embeddings (a run's memory
bank, a split it embeds, or a features file), keeps the labels of --labelled_per_class images
a class (and, on the same draws, of each --labelled_per_class_sweep level), propagates them
with LLP, a weighted kNN (not in Table 5), label spreading (LS), label propagation (LP), DMT's
normalized cut (LP_DMT) and DLP, and prints each one's accuracy on the rest next to the
paper's Table 5, and LLP minus each method draw by draw (mean, std, 95% interval, draws won).
Then it tests the paper's two claims beside Table 5 by two one-sided paired t-tests at 5%:
LLP "comparable" to LP_DMT (equivalence within +-1 accuracy point) and "only slightly lower"
than DLP (a gap between 0 and 2.2 points); each holds, does not hold, or is not resolved. The
paper claims nothing about LS or LP. Every method takes a stated external default (each flag
says whose); none is chosen on the data. Results go to a JSON file.
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
from llp_tf.after_training.transduction import method_settings  # noqa: E402 -- no TF
from llp_tf.after_training.transduction import protocol as protocol_lib  # noqa: E402 -- no TF
from llp_tf.after_training.transduction import rbf_graph_propagation  # noqa: E402 -- no TF
from llp_tf.after_training.transduction import dmt_normalized_cut  # noqa: E402 -- no TF
from llp_tf.core import hyperparameters  # noqa: E402 -- no TensorFlow
from llp_tf.counted_nouns import counted  # noqa: E402
from llp_tf.tensor_types import Array  # noqa: E402
from llp_tf.training.config import TrainConfig  # noqa: E402 -- no TensorFlow

OUTPUT_NAME = "propagation_comparison.json"
#: --labelled_per_class_sweep's default: the paper's 5, then twice and four times as many.
SWEEP = ["5", "10", "20"]
#: Keys of the results file that mark an earlier one, which --output replaces.
RESULT_KEYS = ("methods", "paper_protocol")


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
                         "are scored. The claims at the end are tested at this level.",
                         flag_values=values)
    flags.DEFINE_list("labelled_per_class_sweep", SWEEP, "Also compare at these L, on the same "
                      "draws (the labelled images of a smaller L are among those of a larger "
                      "one); empty (--labelled_per_class_sweep=) for --labelled_per_class only. "
                      "Each L must be below --images_per_class: given levels that are not are "
                      "an error, default ones are left out with a note.", flag_values=values)
    flags.DEFINE_integer("draws", protocol_lib.PAPER_DRAWS, "R: random subsets drawn (the "
                         "paper's 10).", flag_values=values)
    flags.DEFINE_integer("seed", 0, "Seed of the draws; the same seed draws the same subsets.",
                         flag_values=values)
    _define_method_flags(values)
    flags.DEFINE_string("output", None, "JSON file of the results (default: "
                        f"<run_dir>/{OUTPUT_NAME}, or <features>_{OUTPUT_NAME} next to "
                        "--features); an existing file is replaced only if it is an earlier "
                        "comparison's results.", flag_values=values)
    command_line.define_verbosity(values)
    return values


def _define_method_flags(values: flags.FlagValues) -> None:
    """The compared methods' hyperparameters, each defaulting to its stated external source."""
    flags.DEFINE_integer("k", hyperparameters.K, "K: labelled neighbours voting in LLP and the "
                         "weighted kNN. Default: the LLP paper's 10, whatever the run trained "
                         "with.", flag_values=values)
    flags.DEFINE_integer("t", hyperparameters.T, "T: neighbours in LLP's local density, taken "
                         "within each draw. Default: the LLP paper's 25 (the authors' release "
                         "defaults to 50).", flag_values=values)
    flags.DEFINE_float("temperature", hyperparameters.TEMPERATURE, "tau of LLP and the weighted "
                       "kNN. Default: the LLP paper's 0.07.", flag_values=values)
    flags.DEFINE_float("rbf_gamma", rbf_graph_propagation.SKLEARN_RBF_GAMMA, "gamma of the RBF "
                       "kernel exp(-gamma |a - b|^2) of label spreading and label propagation. "
                       "Default: scikit-learn's LabelSpreading/LabelPropagation default, 20.",
                       flag_values=values)
    flags.DEFINE_float("label_spreading_alpha", rbf_graph_propagation.ZHOU_LABEL_SPREADING_ALPHA,
                       "alpha of label spreading, in (0, 1). Default: Zhou et al. 2004's 0.99 "
                       "(scikit-learn's own default, 0.2, goes with its 30-step cap).",
                       flag_values=values)
    flags.DEFINE_integer("dmt_k", None, "K: neighbours of each point in LP_DMT's graph (at "
                         "most the drawn images - 1). Default: ceil(ln n) for the n = --classes "
                         "x --images_per_class drawn points (8 at 2,500), von Luxburg 2007's "
                         "rule for kNN graphs; DMT's ImageNet release "
                         f"(notebooks/nc_imagenet.ipynb) uses {dmt_normalized_cut.RELEASE_K} "
                         "for 151,517 points, which links a 500-point draw whole.",
                         flag_values=values)
    flags.DEFINE_integer("dmt_eigenvectors", None, "The smallest eigenvectors of LP_DMT's "
                         "normalised Laplacian it propagates with, the first (constant) "
                         "dropped; at least 2. Default: --classes, von Luxburg 2007's rule for "
                         "that many clusters; DMT's release uses "
                         f"{dmt_normalized_cut.RELEASE_EIGENVECTORS} for 1,000 classes.",
                         flag_values=values)
    flags.DEFINE_integer("dlp_k", None, "k: neighbours of each point in DLP's graph. Default: a "
                         "tenth of --images_per_class (rounded down), at least 1 and at most "
                         "50: Iscen et al.'s release uses k = 50 on CIFAR-100's 500 training "
                         "images a class; at the paper's 50 a class, k = 50 would link each "
                         "point to more points than its class has.", flag_values=values)


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


def labelled_levels(options: flags.FlagValues, images: int, stream: TextIO) -> list[int]:
    """The sweep's levels of labelled images per class, each below ``images``: ConfigError for a
    given one that is not, a note for a default one left out."""
    try:
        levels = [int(level) for level in options.labelled_per_class_sweep]
    except ValueError:
        _fail(f"--labelled_per_class_sweep must list whole numbers separated by commas, got "
              f"{','.join(options.labelled_per_class_sweep)}.")
    low = [level for level in levels if level < 1]
    if low:
        _fail(f"--labelled_per_class_sweep levels must be at least 1, got {low[0]}.")
    high = sorted(level for level in set(levels) if level >= images)
    if high and options["labelled_per_class_sweep"].present:
        _fail(f"--labelled_per_class_sweep level {high[0]} leaves no image to score at "
              f"--images_per_class={images}: each level L keeps the labels of L of the "
              f"{images} images a class and scores the rest; lower the level or raise "
              f"--images_per_class.")
    if high:
        stream.write(f"note: the sweep's {' and '.join(str(h) for h in high)} labelled per "
                     f"class need more than --images_per_class={images} images a class; left "
                     f"out.\n")
    return sorted({level for level in levels if level < images})


def _note_run_settings(config: TrainConfig | None, settings: method_settings.MethodSettings,
                       stream: TextIO) -> None:
    """A note when the run trained with other K, T or tau than those compared."""
    from llp_tf.training.methods import method_class

    if config is None or not method_class(config.method.name).keeps_bank:
        return
    trained = config.method_settings
    pairs = (("K", trained.k, settings.k.value), ("T", trained.t, settings.t.value),
             ("tau", trained.temperature, settings.temperature.value))
    if any(run != used for _, run, used in pairs):
        stream.write("note: the run trained with " + " ".join(f"{n}={r:g}" for n, r, _ in pairs)
                     + "; the comparison uses " + " ".join(f"{n}={u:g}" for n, _, u in pairs)
                     + " (give --k, --t, --temperature to change them).\n")


def run_comparison(options: flags.FlagValues,
                   stream: TextIO = sys.stdout) -> dict[int, protocol_lib.Comparison]:
    """Reads the embeddings, runs the comparison at every level, prints and writes the results.

    Returns labelled per class -> `transduction.protocol.Comparison`.
    """
    images, labelled, draws = options.images_per_class, options.labelled_per_class, options.draws
    levels = sorted(set(labelled_levels(options, images, stream)) | {labelled})
    features, labels, source, config = read_embeddings(options, stream)
    num_classes = classes_per_draw(options, labels, stream)
    protocol_lib.check_protocol(labels, num_classes, images, labelled, draws)
    given = {name: options[name].value for name in
             ("k", "t", "temperature", "rbf_gamma", "label_spreading_alpha", "dmt_k",
              "dmt_eigenvectors", "dlp_k")
             if options[name].present}
    settings = method_settings.resolve(images, given, num_classes)
    _note_run_settings(config, settings, stream)
    available = protocol_lib.eligible_classes(labels, images)
    protocol = {"classes": int(num_classes), "classes_available": available,
                "class_draw_vacuous": protocol_lib.class_draw_is_vacuous(labels, num_classes,
                                                                         images),
                "images_per_class": images, "labelled_per_class": labelled,
                "labelled_per_class_sweep": levels, "draws": draws, "seed": options.seed,
                "feature_rows": int(len(labels)), "feature_dim": int(features.shape[1])}
    output = options.output or default_output(options.run_dir, options.features)
    result_files.check_result_file(output, RESULT_KEYS)

    sweep = report.run_and_report(features, labels, source, num_classes, images, levels,
                                  labelled, draws, options.seed, settings, stream)
    result_files.write_json_atomically(
        output, report.results_json(sweep, labelled, protocol, settings, source), RESULT_KEYS)
    stream.write(f"wrote {output}\n")
    return sweep


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
