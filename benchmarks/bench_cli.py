"""Command-line plumbing shared by the benchmarks.

The benchmarks are scripts run from benchmarks/, like the tools from tools/,
and use the tools' quiet start (`quiet_start`) and flag handling
(`tool_cli`): importing this module puts tools/ on the import path (after
benchmarks/), so a benchmark starts with ``import bench_cli``, then
``import quiet_start`` and its call, before anything imports TensorFlow.
Each benchmark's flags live in its own `FlagValues` (`new_flag_values`),
with --verbosity, and, when some sizes are slow, --full: the sizes the
figures of docs/performance.md were measured at, for every size flag not given
explicitly. This module imports only absl.
"""

import os
import sys

from absl import flags

TOOLS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools")
if TOOLS_DIR not in sys.path:
    sys.path.insert(1, TOOLS_DIR)

import tool_cli  # noqa: E402 -- tools/ is on the path from here on


def new_flag_values(full_sizes=None):
    """A `flags.FlagValues` with --help, --verbosity and, given ``full_sizes``
    ({flag name: its full-size value}), --full; define the benchmark's flags on it."""
    values = tool_cli.new_flag_values()
    tool_cli.define_verbosity(values)
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
    """`tool_cli.run` of ``body(values, stdout, stderr)`` with --full applied
    (`apply_full`) first; returns the exit code."""
    def sized_body(parsed, out, err):
        if full_sizes:
            apply_full(parsed, full_sizes)
        return body(parsed, out, err)
    return tool_cli.run(argv, stdout, stderr, values, usage, sized_body)


def paper_llp_settings():
    """`LLPMethod`'s keyword arguments at the config's defaults (the paper's K,
    T, tau, locally weighted propagation, confidence weights, categorisation)."""
    from llp_tf.training.methods.llp import LLPSettings  # noqa: PLC0415 -- loads TensorFlow
    method = LLPSettings()
    return dict(temperature=method.temperature, k=method.k, t=method.t,
                propagation_method=method.propagation,
                weight_by_confidence=method.weight_by_confidence,
                use_categorisation=method.use_categorisation,
                density_chunk_size=method.density_chunk_size)
