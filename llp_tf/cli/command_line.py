"""Command-line plumbing shared by the tools: each keeps its flags in its own `FlagValues`
(so its `main` runs several times in one process), with one handling of --help, bad flags
and stray arguments, errors naming where each setting came from (`flag_origins`), absl
INFO logs hidden without --verbosity, and help naming the tools as the user runs them
(`llp_tf.tool_names`). Imports only absl and that module, so predict runs with TensorFlow
and llp_tf alone."""

import os
import socket
import sys
from typing import Any, Callable, Mapping, Sequence, TextIO

from absl import flags, logging

from llp_tf.tool_names import spoken


def new_flag_values() -> flags.FlagValues:
    """A `flags.FlagValues` holding only --help/-h; define the tool's flags on it."""
    values = flags.FlagValues()
    flags.DEFINE_boolean("help", False, "Show this help and exit.", short_name="h",
                         flag_values=values)
    return values


def define_verbosity(values: flags.FlagValues) -> None:
    """Defines absl's --verbosity (-v) on ``values``, with absl's help and default."""
    flags.DEFINE_integer("verbosity", -1, "Logging verbosity level. Messages logged at this "
                         "level or lower will be included. Set to 1 for debug logging. If the "
                         "flag was not set or supplied, the value will be changed from the "
                         "default of -1 (warning) to 0 (info) after flags are parsed. On the "
                         "command line, 0 or more also shows TensorFlow's start-up notices "
                         "(oneDNN, CUDA probing, CPU features), hidden otherwise.",
                         short_name="v", flag_values=values)


def define_run_dir(values: flags.FlagValues, role: str) -> None:
    """Defines --run_dir, ``role`` saying what the tool does with the run."""
    flags.DEFINE_string("run_dir", None, "Directory of a training run made by tools/train.py "
                        f"{role}; required.", flag_values=values)


def define_checkpoint(values: flags.FlagValues) -> None:
    """Defines --checkpoint, read back by `llp_tf.training.run_directory.resolve_checkpoint`."""
    flags.DEFINE_string("checkpoint", None, "Checkpoint of --run_dir to read: a checkpoint path "
                        "of the run, or its step number (e.g. 1829); the latest when unset.",
                        flag_values=values)


def define_data_dir(values: flags.FlagValues, role: str = "the dataset") -> None:
    """Defines --data_dir: where ``role`` (a dataset name's data) lives."""
    flags.DEFINE_string("data_dir", None, f"Data folder of {role}: TFDS's data_dir (TFDS's "
                        "default when unset), and the folder relative tfrecord:, folder:, list: "
                        "and places205: paths are taken from.", flag_values=values)


def default_at_most(values: flags.FlagValues, name: str, available: int, stream: TextIO,
                    reason: str) -> int:
    """The integer flag --``name``'s value, lowered to ``available`` (with a note on
    ``stream`` starting with ``reason``) when it was left at a larger default."""
    if values[name].present or values[name].value <= available:
        return values[name].value
    stream.write(f"note: {reason}; using --{name}={available} instead of the default "
                 f"{values[name].value} (give --{name} to choose).\n")
    return available


#: absl's other spellings of --help, which `parse` reads as --help.
HELP_SPELLINGS = ("--helpfull", "-helpfull", "--helpshort", "-helpshort")


def _with_help_spellings(argv):
    """``argv`` with `HELP_SPELLINGS` before a ``--`` replaced by --help."""
    end = argv.index("--") if "--" in argv else len(argv)
    return [("--help" if arg in HELP_SPELLINGS and position < end else arg)
            for position, arg in enumerate(argv)]


def _flag_named(values, arg):
    """The name of the flag of ``values`` that the argument ``arg`` sets, or None."""
    if not arg.startswith("-") or arg in ("-", "--"):
        return None
    name = arg.lstrip("-").split("=", 1)[0]
    if name not in values and name.startswith("no") and name[2:] in values:
        name = name[2:]
    if name not in values:
        return None
    return values[name].name


def flag_origins(values: flags.FlagValues, argv: Sequence[str],
                 file_names: Mapping[str, str] | None = None) -> dict[str, str]:
    """dict flag name -> where its value comes from in ``argv`` (the last setting wins):
    "command line", "from PATH" (a --flagfile, named by ``file_names`` if there) or
    "default"."""
    origins = {values[name].name: "default" for name in values}
    args = iter(argv[1:])
    for arg in args:
        if arg == "--":
            break
        if arg in ("--flagfile", "-flagfile"):
            arg = "--flagfile=" + next(args, "")
        if arg.lstrip("-").startswith("flagfile="):
            lines = values.read_flags_from_files([arg], force_gnu=False)
            path = arg.split("=", 1)[1]
            origin = "from " + (file_names or {}).get(path, path)
        else:
            lines, origin = [arg], "command line"
        for line in lines:
            name = _flag_named(values, line)
            if name is not None:
                origins[name] = origin
    return origins


def quiet_absl_info(values: flags.FlagValues) -> None:
    """Sets absl's logging verbosity to --verbosity when given, else to WARNING."""
    if values["verbosity"].present:
        logging.set_verbosity(values.verbosity)
    else:
        logging.set_verbosity(logging.WARNING)


def parse(values: flags.FlagValues, argv: Sequence[str], usage: str, stdout: TextIO,
          stderr: TextIO, positional: bool = False, stray_exit_code: int = 1
          ) -> tuple[list[str] | None, int | None]:
    """Parses ``argv`` (argv[0] is the program) into ``values``: (the other arguments,
    None) to go on, or (None, exit code) to stop: 0 after --help (printing ``usage`` and the
    flags, tools named by `spoken`), 1 after an error on ``stderr``, ``stray_exit_code``
    after unexpected arguments (unless ``positional``)."""
    try:
        rest = values(_with_help_spellings(list(argv)))
    except flags.Error as error:
        if not values["help"].value:
            stderr.write(f"error: {error}\nRun with --help for the flags.\n")
            return None, 1
        rest = None
    if values["help"].value:
        stdout.write(spoken(usage + "\nFlags:\n" + values.get_help(include_special_flags=False))
                     + "\n")
        return None, 0
    if len(rest) > 1 and not positional:
        stderr.write(f"error: unexpected arguments: {' '.join(rest[1:])}\n")
        return None, stray_exit_code
    return rest[1:], None


#: How `run` takes the arguments that are not flags: all of them given to the tool's body
#: (`POSITIONAL`), or those after the first ``--`` (`AFTER_DASHES`); unset, they are refused.
POSITIONAL, AFTER_DASHES = "positional", "after --"


def split_at_dashes(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the tool's argv, the words after its first ``--``), so that flags after it (even --help)
    are not the tool's."""
    if "--" not in argv:
        return list(argv), []
    position = argv.index("--")
    return list(argv[:position]), list(argv[position + 1:])


def run(argv: Sequence[str], stdout: TextIO | None, stderr: TextIO | None,
        values: flags.FlagValues, usage: str, body: Callable[..., Any],
        stray_exit_code: int = 1, error_prefix: str = "error: ",
        origins: Callable[[flags.FlagValues, Sequence[str]], dict[str, str]] | None
        = flag_origins, arguments: str | None = None, run_dir_of: str | None = None) -> int:
    """The ``main`` of a tool: `parse`, `check_run_dir` of a run of ``run_dir_of`` if given,
    --verbosity, then `exit_code_of` ``body(values, stdout, stderr)`` with errors naming
    ``origins(values, argv)`` (None: not named). With ``arguments`` (`POSITIONAL` or
    `AFTER_DASHES`) the body is ``body(values, the arguments, stdout, stderr)``."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    argv, after_dashes = (split_at_dashes(argv) if arguments == AFTER_DASHES
                          else (list(argv), []))
    rest, exit_code = parse(values, argv, usage, stdout, stderr,
                            positional=arguments == POSITIONAL, stray_exit_code=stray_exit_code)
    if exit_code is not None:
        return exit_code
    if run_dir_of and not check_run_dir(values.run_dir, run_dir_of, stderr,
                                        flag_origins(values, argv)["run_dir"]):
        return 1
    if "verbosity" in values:
        quiet_absl_info(values)
    given = {None: (), POSITIONAL: (rest,), AFTER_DASHES: (after_dashes,)}[arguments]
    return exit_code_of(lambda: body(values, *given, stdout, stderr), stderr, error_prefix,
                        origins=origins and (lambda: origins(values, argv)))


class ExitCode(int):
    """What a tool's body returns to end with an exit code other than 0."""


def exit_code_of(body: Callable[[], Any], stderr: TextIO, prefix: str = "error: ",
                 origins: Callable[[], Mapping[str, str]] | None = None) -> int:
    """Runs ``body()``: the `ExitCode` it returns, else 0; or 1 after one ``prefix`` line for
    an `LLPError`, naming where its settings came from (``origins()``). Imports nothing: an
    LLPError is raised only once ``llp_tf.errors`` is imported (predict never imports it)."""
    try:
        result = body()
    except Exception as error:
        errors = sys.modules.get("llp_tf.errors")
        if errors is None or not isinstance(error, errors.LLPError):
            raise
        if origins is not None:
            error = error.with_origins(origins())
        stderr.write(f"{prefix}{error}\n")
        return 1
    return int(result) if isinstance(result, ExitCode) else 0


def check_run_dir(run_dir: str | None, what: str, stderr: TextIO,
                  origin: str = "command line") -> bool:
    """Whether ``run_dir`` is an existing directory; if not, an error naming ``what`` on
    ``stderr``."""
    if not run_dir:
        stderr.write(f"error: give --run_dir, the directory of {what}.\n")
        return False
    if not os.path.isdir(run_dir):
        problem = "is a file" if os.path.isfile(run_dir) else "does not exist"
        stderr.write(f"error: --run_dir={run_dir} ({origin}) {problem}; give the directory of "
                     f"{what}.\n")
        return False
    return True


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports free on ``host`` (bound to port 0 together, released)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
