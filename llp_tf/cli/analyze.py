"""Analyse the embedding of a trained LLP run: aggregation scores and a 2-D MDS.

  tools/analyze.py --run_dir=runs/demo
  tools/analyze.py --run_dir=runs/demo --classes=3 --points_per_class=200 --notrajectory

Reads the memory bank of a run that keeps one and writes into --output_dir (default
RUN_DIR/analysis) the plots, analysis_summary.txt and analysis.json, and into its projector/
folder a sample of the bank for TensorBoard's projector: tensorboard --logdir
RUN_DIR/analysis/projector.
"""

import os
import sys
from typing import Sequence, TextIO

from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)

from absl import flags  # noqa: E402

from llp_tf.cli import command_line  # noqa: E402

DEFAULT_MDS_CLASSES = 5
DEFAULT_POINTS_PER_CLASS = 100
#: As llp_tf.after_training.analysis.projector.DEFAULT_ROWS (that module imports numpy).
DEFAULT_PROJECTOR_ROWS = 10_000
OUTPUT_SUBDIR = "analysis"
#: As llp_tf.after_training.analysis.projector.SUBDIR.
PROJECTOR_SUBDIR = "projector"


def make_flags() -> flags.FlagValues:
    """The tool's `flags.FlagValues`."""
    values = command_line.new_flag_values()
    command_line.define_run_dir(values, "(LLP, finished or running) to analyse")
    flags.DEFINE_string("output_dir", None, "Where to write the plots, analysis_summary.txt "
                        "and analysis.json; default RUN_DIR/analysis. Files of those names "
                        "are replaced only if they are an earlier analysis (its "
                        "analysis.json); other files there are left alone.",
                        flag_values=values)
    flags.DEFINE_integer("classes", DEFAULT_MDS_CLASSES, "Classes drawn in the MDS plot (a "
                         "seeded random choice; see --class_ids). Left at its default, it is "
                         "lowered to the classes the run's bank holds, with a note.",
                         lower_bound=1, flag_values=values)
    flags.DEFINE_list("class_ids", None, "Exact classes for the MDS plot, e.g. 0,3,7 (class "
                      "numbers); overrides --classes.", flag_values=values)
    flags.DEFINE_integer("points_per_class", DEFAULT_POINTS_PER_CLASS, "Bank rows per class in "
                         "the MDS plot (all labelled ones first); MDS time grows with the "
                         "square of the total.", lower_bound=1, flag_values=values)
    flags.DEFINE_integer("projector_rows", DEFAULT_PROJECTOR_ROWS, "Bank rows written for "
                         "TensorBoard's projector into OUTPUT_DIR/projector (embeddings.tsv, "
                         "metadata.tsv with each row's class or pseudo-class, labelled or not, "
                         "confidence and true class, projector_config.pbtxt): all rows of a "
                         "smaller bank, else a seeded uniform sample (--seed); 0 writes none. "
                         "The default keeps the projector responsive in a browser.",
                         lower_bound=0,
                         flag_values=values)
    flags.DEFINE_integer("seed", 0, "Seed of the MDS class choice, row sample and layout, and "
                         "of the projector's sample.", flag_values=values)
    flags.DEFINE_boolean("trajectory", True, "Score every kept checkpoint (restoring each); "
                         "--notrajectory scores the latest one only (faster on big runs), and "
                         "the trajectory plot then shows metrics.jsonl alone.",
                         flag_values=values)
    return values


def analyze(values: flags.FlagValues, stdout: TextIO,
            stderr: TextIO) -> command_line.ExitCode | None:
    """Analyses --run_dir as the flags say; `ExitCode` 1 after a bad input."""
    class_ids = None
    if values.class_ids:
        try:
            class_ids = [int(c) for c in values.class_ids]
        except ValueError:
            stderr.write(f"error: --class_ids must be class numbers, e.g. 0,3,7; got "
                         f"{','.join(values.class_ids)}.\n")
            return command_line.ExitCode(1)

    # These import TensorFlow: only once the flags are valid.
    from llp_tf.after_training.analysis.report import (  # noqa: PLC0415
        check_output_dir, write_report)
    from llp_tf.after_training.analysis.run_analysis import analyze_run  # noqa: PLC0415
    from llp_tf.after_training.analysis.summary import summary_text  # noqa: PLC0415
    from llp_tf.counted_nouns import counted  # noqa: PLC0415

    def report(line):
        stdout.write(line + "\n")
        stdout.flush()

    def mds_classes_for(available):
        return command_line.default_at_most(
            values, "classes", available, stdout,
            f"the run's bank holds examples of {counted(available, 'class')}")

    output_dir = values.output_dir or os.path.join(values.run_dir, OUTPUT_SUBDIR)
    try:
        check_output_dir(output_dir)
        result = analyze_run(
            values.run_dir, num_mds_classes=values.classes,
            points_per_class=values.points_per_class, seed=values.seed,
            trajectory=values.trajectory, class_ids=class_ids, report=report,
            mds_classes_for=mds_classes_for, projector_rows=values.projector_rows)
        written = write_report(result, output_dir)
    except OSError as error:
        stderr.write(f"error: cannot write the analysis: {error}\n")
        return command_line.ExitCode(1)
    stdout.write("\n" + summary_text(result) + "\nWritten:\n")
    for path in written.values():
        stdout.write(f"  {path}\n")
    if result.projector is not None:
        stdout.write("The bank in TensorBoard's projector: tensorboard --logdir "
                     f"{os.path.join(output_dir, PROJECTOR_SUBDIR)}\n")
    return None


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Runs the tool on ``argv`` (default sys.argv); returns the exit code."""
    argv = sys.argv if argv is None else argv
    return command_line.run(argv, stdout, stderr, make_flags(), __doc__, analyze, origins=None,
                            run_dir_of="an LLP training run")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
