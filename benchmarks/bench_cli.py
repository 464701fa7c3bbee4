"""Command-line plumbing shared by the benchmarks.

The benchmarks are scripts run from benchmarks/, like the tools from tools/,
and use the tools' quiet start (`llp_tf.cli.quiet_start`) and flag handling
(`llp_tf.cli.command_line`): a benchmark starts with ``import bench_cli``, then
imports `quiet_start` and calls it, before anything imports TensorFlow.
Each benchmark's flags live in its own `FlagValues` (`new_flag_values`),
with --verbosity, and, when some sizes are slow, --full: the sizes the
figures of docs/performance.md were measured at, for every size flag not given
explicitly. This module imports only absl (and llp_tf.cli.command_line, which imports only absl).
"""

from absl import flags

from llp_tf.cli import command_line


def new_flag_values(full_sizes=None):
    """A `flags.FlagValues` with --help, --verbosity and, given ``full_sizes``
    ({flag name: its full-size value}), --full; define the benchmark's flags on it."""
    values = command_line.new_flag_values()
    command_line.define_verbosity(values)
    if full_sizes:
        flags.DEFINE_boolean("full", False, "Run at the sizes the figures of "
                             "docs/performance.md were measured at (slow): "
                             + _flag_list(full_sizes) + ", for each of these flags not given "
                             "explicitly.", flag_values=values)
    return values


def _flag_list(sizes):
    return " ".join(f"--{name}={','.join(map(str, value)) if isinstance(value, list) else value}"
                    for name, value in sizes.items())


def apply_full(values, full_sizes):
    """With --full, sets every flag of ``full_sizes`` not given on the command
    line to its full-size value."""
    if not values.full:
        return
    for name, value in full_sizes.items():
        if not values[name].present:
            values[name].value = value


def run(argv, stdout, stderr, values, usage, body, full_sizes=None):
    """`command_line.run` of ``body(values, stdout, stderr)`` with --full applied
    (`apply_full`) first; returns the exit code."""
    def sized_body(parsed, out, err):
        if full_sizes:
            apply_full(parsed, full_sizes)
        return body(parsed, out, err)
    return command_line.run(argv, stdout, stderr, values, usage, sized_body)


def paper_llp_settings():
    """`LLPSettings` at the config's defaults (the paper's K, T, tau, locally weighted
    propagation, confidence weights, categorisation), without the warm start."""
    from llp_tf.training.methods.llp import LLPSettings  # noqa: PLC0415 -- loads TensorFlow
    return LLPSettings(warmup_epochs=0)
