"""Trains several methods on one regime over several seeds and tabulates top-1.

  tools/compare_methods.py                      # the methods' table: every method, the demo
  tools/compare_methods.py --methods=llp,fixmatch --seeds=0 -- --epochs=10
  tools/compare_methods.py --label_fractions=p1,p10 --methods=llp,supervised,mean_teacher

Each (method, seed) is one run of tools/train.py in --runs_dir/METHOD_seedS with the
arguments after `--`; a finished run is not trained again. The table (val_top1 of the last
evaluation per seed, their mean and spread) is printed as Markdown and written as JSON to
--output. Mean Teacher's student has a row of its own beside its teacher's.

With --label_fractions (Table 1 at small scale): each (fraction, method, split seed) is one
run in --runs_dir/FRACTION/METHOD_splitS with --label_percent for the fraction's labelled
images a class and --split_seed=S --seed=S (a labelled set drawn at random, the same for
every method); per fraction each method's mean, 95% Student t interval over the split seeds
and passes over each labelled image, and the paper's orderings tested on paired differences.
"""

import os
import sys
from typing import Sequence, TextIO

from absl import flags

from llp_tf import result_files
from llp_tf.cli import command_line
from llp_tf.training import method_comparison, paired_statistics, table_one
from llp_tf.training.method_comparison import METRIC

#: How each run starts: tools/train.py's module, with this Python.
TRAIN_COMMAND = (sys.executable, "-m", "llp_tf.cli.train")

#: Keys of the table's JSON file that mark an earlier one, which --output replaces.
RESULT_KEYS = ("regime", "seeds", "metric")


def make_flags() -> flags.FlagValues:
    """The tool's `flags.FlagValues`."""
    from llp_tf.training.methods import METHODS  # noqa: PLC0415 -- imports no TensorFlow
    from llp_tf.training.regimes import known_regimes  # noqa: PLC0415 -- nor this

    values = command_line.new_flag_values()
    flags.DEFINE_string("regime", "demo", "The regime every run starts from (the train "
                        f"tool's --regime): {', '.join(known_regimes())}.",
                        flag_values=values)
    flags.DEFINE_list("methods", list(METHODS), "Methods to train, in the table's order.",
                      flag_values=values)
    flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (--seed of each run; one column each).",
                      flag_values=values)
    flags.DEFINE_string("runs_dir", "runs/methods", "Directory of the runs, one subdirectory "
                        "METHOD_seedS each.", flag_values=values)
    flags.DEFINE_string("output", None, "JSON file of the table (default: "
                        "--runs_dir/methods_table.json, with --label_fractions "
                        "--runs_dir/label_fractions.json); an existing file is replaced only "
                        "if it is an earlier table.", flag_values=values)
    flags.DEFINE_list("label_fractions", [], "Table 1 of the paper at small scale: train at "
                      "each of these of its label fractions (" + ", ".join(table_one.FRACTIONS)
                      + ": ImageNet's 1-10%), each as ImageNet's labelled images a class "
                      "(round(p% x 1,281,167 / 1,000): p1 13, p10 128), over --split_seeds; "
                      "--seeds is then not used.", flag_values=values)
    flags.DEFINE_list("split_seeds", ["0", "1", "2"], "With --label_fractions: the labelled "
                      "sets, each drawn at random per class by --split_seed=S (the run's "
                      "--seed=S too), the same for every method.", flag_values=values)
    flags.DEFINE_integer("images_per_class", 400, "With --label_fractions: training images a "
                         "class of the regime's dataset (mnist5k: 400), to turn labelled "
                         "images a class into --label_percent.", flag_values=values)
    flags.DEFINE_float("equivalence_margin", 0.02, "With --label_fractions: a paired "
                       "difference of top-1 whose 95% interval lies within +-this is "
                       "equivalence (Table 1's supervised ~ Mean Teacher at 1%: 17.35 and "
                       "16.91); fixed before any run.", flag_values=values)
    return values


def compare(values: flags.FlagValues, extra_args: Sequence[str], stdout: TextIO,
            stderr: TextIO) -> int:
    """Trains every (method, seed) and writes the table; returns the exit code.

    Raises:
      ConfigError: --output exists and is not an earlier table (before any training).
    """
    from llp_tf.training.methods import METHODS  # noqa: PLC0415

    unknown = [m for m in values.methods if m not in METHODS]
    if unknown:
        stderr.write(f"error: unknown method {unknown[0]!r}; known: {', '.join(METHODS)}.\n")
        return 1
    if values.label_fractions:
        return compare_fractions(values, extra_args, stdout, stderr)
    output = values.output or os.path.join(values.runs_dir, "methods_table.json")
    result_files.check_result_file(output, RESULT_KEYS)
    results = {}
    for method in values.methods:
        for seed in values.seeds:
            try:
                row = method_comparison.train(TRAIN_COMMAND, values.regime, method, seed,
                                              values.runs_dir, extra_args, stderr)
            except method_comparison.ComparisonError as error:
                stderr.write(f"error: {error}\n")
                return 1
            for label, value in method_comparison.table_rows(method, row).items():
                results.setdefault(label, {})[seed] = value
    result_files.write_json_atomically(output, {
        "regime": values.regime, "train_args": extra_args, "metric": METRIC,
        "seeds": values.seeds, METRIC: results}, RESULT_KEYS)
    stdout.write(method_comparison.table(results, values.seeds) + "\n")
    stdout.write(f"Written to {output}.\n")
    return 0


def compare_fractions(values: flags.FlagValues, extra_args: Sequence[str], stdout: TextIO,
                      stderr: TextIO) -> int:
    """Trains every (fraction, method, split seed), writes every number as JSON and prints
    each fraction's table and verdict; returns the exit code."""
    percents = {fraction: table_one.label_percent(fraction, values.images_per_class)
                for fraction in values.label_fractions}
    output = values.output or os.path.join(values.runs_dir, "label_fractions.json")
    result_files.check_result_file(output, RESULT_KEYS)
    seeds = values.split_seeds
    record = {"regime": values.regime, "train_args": extra_args, "metric": METRIC,
              "seeds": seeds, "interval": f"{paired_statistics.LEVEL:.0%} Student t over the "
              "split seeds", "equivalence_margin": values.equivalence_margin,
              "images_per_class": values.images_per_class, "fractions": {}}
    tables = []
    for fraction, percent in percents.items():
        top1, exposure = {}, {}
        for method in values.methods:
            for seed in seeds:
                directory = method_comparison.fraction_run_dir(values.runs_dir, fraction,
                                                               method, seed)
                try:
                    row = method_comparison.train(
                        TRAIN_COMMAND, values.regime, method, seed, values.runs_dir,
                        extra_args, stderr, directory=directory,
                        flags=(f"--label_percent={percent:g}", f"--split_seed={seed}"))
                except method_comparison.ComparisonError as error:
                    stderr.write(f"error: {error}\n")
                    return 1
                for label, value in method_comparison.table_rows(method, row).items():
                    top1.setdefault(label, {})[seed] = value
                exposure.setdefault(method, {})[seed] = method_comparison.run_exposure(
                    directory, row)
        summary = method_comparison.fraction_summary(fraction, top1, exposure, seeds,
                                                     values.equivalence_margin)
        record["fractions"][fraction] = {"label_percent": percent, **summary}
        tables.append(method_comparison.fraction_table(fraction, summary, seeds))
    result_files.write_json_atomically(output, record, RESULT_KEYS)
    stdout.write("\n\n".join(tables) + "\n")
    stdout.write(f"Written to {output}.\n")
    return 0


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Runs the tool on ``argv`` (default sys.argv); returns the exit code."""
    argv = sys.argv if argv is None else argv
    return command_line.run(
        argv, stdout, stderr, make_flags(), __doc__,
        lambda values, extra_args, out, err: command_line.ExitCode(
            compare(values, extra_args, out, err)),
        origins=None, arguments=command_line.AFTER_DASHES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
