"""Runs a multi-worker training on this machine: W worker processes of the command after
`--`, each with its own TF_CONFIG (worker 0 the chief), their output prefixed `[worker I] `.

  tools/launch_local.py --workers=2 -- tools/train.py --regime=demo --run_dir=runs/demo_mw

When one worker fails the others are stopped and its exit code is the launcher's; after
--timeout_seconds all are stopped, exit 124; Ctrl-C, SIGTERM or SIGHUP stops all, exit 128+N.
POSIX only.
"""

import sys
from typing import Sequence, TextIO

from absl import flags

from llp_tf.cli import command_line
from llp_tf.training import local_launcher
from llp_tf.tool_names import tool


def make_flags() -> flags.FlagValues:
    """The tool's `flags.FlagValues`."""
    values = command_line.new_flag_values()
    flags.DEFINE_integer("workers", 2, "Worker processes to start (at least 1); worker 0 is "
                         "the chief.", flag_values=values)
    flags.DEFINE_float("timeout_seconds", 0, "Stop every worker and exit 124 after this many "
                       "seconds; 0: no limit.", lower_bound=0, flag_values=values)
    return values


def launch(values: flags.FlagValues, command: Sequence[str], stdout: TextIO,
           stderr: TextIO) -> command_line.ExitCode:
    """Runs the worker ``command`` as the flags say; the workers' exit code, 1 after a bad
    input."""
    if values.workers < 1:
        stderr.write(f"error: --workers must be at least 1, not {values.workers}.\n")
        return command_line.ExitCode(1)
    if not command:
        stderr.write("error: give the worker command after --, e.g. "
                     f"{tool('launch_local')} --workers=2 -- {tool('train')} --regime=demo\n")
        return command_line.ExitCode(1)
    return command_line.ExitCode(local_launcher.launch(
        list(command), command_line.free_ports(values.workers), values.timeout_seconds, stdout,
        stderr))


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Runs the tool on ``argv`` (default sys.argv); returns the workers' exit code, 1
    after an error of the launcher."""
    argv = sys.argv if argv is None else argv
    return command_line.run(argv, stdout, stderr, make_flags(), __doc__, launch, origins=None,
                            arguments=command_line.AFTER_DASHES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
