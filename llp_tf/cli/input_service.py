"""Runs a tf.data service for the training input: a dispatcher and/or workers.

  tools/input_service.py --workers=2
  tools/train.py --regime=demo --input_service=grpc://127.0.0.1:5050

Starts a dispatcher here (unless --dispatcher_address joins one elsewhere) with --workers
workers, and prints the --input_service=grpc://... flag for tools/train.py. Runs until
SIGTERM, SIGINT or SIGHUP, then exits 0. Several machines: a dispatcher on one, and on the
others workers that join it with --dispatcher_address.
"""

import sys
from typing import Sequence, TextIO

from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)

from absl import flags  # noqa: E402

from llp_tf.cli import command_line  # noqa: E402
from llp_tf.data.pipeline import input_service  # noqa: E402


def make_flags() -> flags.FlagValues:
    """The tool's `flags.FlagValues`."""
    values = command_line.new_flag_values()
    flags.DEFINE_string("dispatcher_address", "", "host:port of a dispatcher running elsewhere "
                        "for this machine's workers to join; empty: start a dispatcher here.",
                        flag_values=values)
    flags.DEFINE_integer("dispatcher_port", 5050, "Port of the dispatcher started here (0: a "
                         "free port).", lower_bound=0, upper_bound=65535, flag_values=values)
    flags.DEFINE_integer("workers", 1, "Workers to start here (0: only the dispatcher, its "
                         "workers all elsewhere).", lower_bound=0, flag_values=values)
    flags.DEFINE_list("worker_ports", [], "Ports of the workers started here, one per worker; "
                      "empty: free ports.", flag_values=values)
    flags.DEFINE_string("host", "127.0.0.1", "Name or address by which the trainers and the "
                        "other machines reach this one; in the addresses announced and "
                        "printed. TensorFlow's servers listen on every interface whatever it "
                        "is, without authentication.", flag_values=values)
    flags.DEFINE_list("worker_addresses", [], "The dispatcher's fixed list of all its workers, "
                      "host:port each, here and elsewhere; empty: the workers started here.",
                      flag_values=values)
    flags.DEFINE_string("work_dir", "", "Folder where the dispatcher journals its state, so "
                        "that a restarted dispatcher resumes its jobs (fault-tolerant mode); "
                        "empty: no journal.", flag_values=values)
    command_line.define_verbosity(values)
    return values


def settings(values: flags.FlagValues) -> input_service.ServiceSettings:
    """The `input_service.ServiceSettings` of the parsed flags."""
    return input_service.ServiceSettings(
        dispatcher_address=values.dispatcher_address, dispatcher_port=values.dispatcher_port,
        workers=values.workers, worker_ports=tuple(values.worker_ports), host=values.host,
        worker_addresses=tuple(values.worker_addresses), work_dir=values.work_dir)


def serve(values: flags.FlagValues, stdout: TextIO, stderr: TextIO) -> command_line.ExitCode:
    """`input_service.serve` of the parsed flags; the exit code."""
    return command_line.ExitCode(input_service.serve(settings(values), command_line.free_ports,
                                                     stdout, stderr))


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Runs the tool on ``argv`` (default sys.argv); returns the exit code (0 after a
    stop signal, 1 after an error)."""
    argv = sys.argv if argv is None else argv
    return command_line.run(argv, stdout, stderr, make_flags(), __doc__, serve)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
