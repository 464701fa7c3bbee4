"""A quiet start for every tool: TensorFlow's start-up notices and runtime
echoes hidden.

Importing TensorFlow and probing for GPUs prints, from TensorFlow's C++
side, lines that tell a user nothing: the oneDNN notice, CUDA probing on a
machine without a GPU, the CPU-feature notice, and absl's line about log
messages before ``absl::InitializeLog()``. They are printed before any flag
is parsed, and ``TF_CPP_MIN_LOG_LEVEL`` does not reach all of them in
TensorFlow 2.21. While it runs, TensorFlow's runtime also logs warnings that
only echo an error the tool then reports itself in one line (an aborted
rendezvous carrying the input's error, a cancelled shard read on the other
workers, libjpeg's words on a truncated JPEG it failed to decode), or that
concern its own internals (a generator dataset it builds for multi-worker
input cannot be optimised).

So each tool calls `import_tensorflow(sys.argv)` before it imports anything
that imports TensorFlow. Unless ``--verbosity`` (``-v``) is 0 or more on the
command line, the process's stderr (file descriptor 2) then runs through a
filter process for the rest of the run: it drops those lines (`NOTICE`,
`ECHO`) and passes every other line on as it comes, so TensorFlow's real
warnings and errors still show, and a crash's last words are not lost with the
process. Set in the environment, ``TF_CPP_MIN_LOG_LEVEL`` is respected;
otherwise it is 1 (TensorFlow's C++ INFO lines hidden, warnings shown) or, with
``--verbosity`` of 0 or more, 0.

This module imports nothing heavy: it must run first.
"""

import atexit
import os
import re
import time
import select
import signal
import sys
from typing import Iterable, Iterator, Sequence

#: Start-up lines hidden without --verbosity: absl INFO lines (``I0000 ...``),
#: absl's pre-initialisation banner, the CPU-feature notice's second line, and
#: CUDA's failed probe on a machine without a GPU driver.
NOTICE = re.compile(r"^(I\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] |"
                    r"WARNING: All log messages before absl::InitializeLog\(\) |"
                    r"To enable the following instructions: |"
                    r"E\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] failed call to cuInit: )")


def requested_verbosity(argv: Sequence[str]) -> int:
    """int: the --verbosity (or -v) given on the command line (-1 if none).

    Reads the forms absl accepts: ``--verbosity=N``, ``--verbosity N``,
    ``-v=N``, ``-v N`` (the last one given wins; flagfiles are not read).
    """
    level = -1
    args = list(argv[1:])
    for position, arg in enumerate(args):
        if arg == "--":
            break
        name, has_value, value = arg.lstrip("-").partition("=")
        if not arg.startswith("-") or name not in ("verbosity", "v"):
            continue
        if not has_value:
            value = args[position + 1] if position + 1 < len(args) else ""
        try:
            level = int(value)
        except ValueError:
            pass  # absl will report the bad value
    return level


#: Runtime lines hidden without --verbosity, each with the lines that continue
#: it (`CONTINUATION`): echoes of an error the tool reports itself, and a notice
#: about a dataset TensorFlow builds for multi-worker input. A truncated JPEG
#: fails to decode (TensorFlow does not recover truncated JPEGs) after one of
#: the last three: TensorFlow's line, or libjpeg's own, printed bare.
ECHO = re.compile(r"^([WE]\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] "
                  r"(Local rendezvous is aborting with status: |"
                  r"Input of GeneratorDatasetOp::Dataset will not be optimized |"
                  r"BaseCollectiveExecutor::StartAbort |"
                  r".*CANCELLED: GetNextFromShard|"
                  r"Premature end of JPEG data\. )|"
                  r"Improper call to JPEG library in state \d+$|"
                  r"Input file read error$)")
#: Lines of a runtime message after its first: the ops it ran (tab-indented),
#: and the lost tasks and failed calls of a collective's report.
CONTINUATION = re.compile(r"^(\t|/job:\w+/|The tasks have crashed\. |"
                          r"The error could be from a previous operation\. |"
                          r"Additional GRPC error information from remote target |"
                          r":UNKNOWN:Error received from peer )")


def without_notices(text: str) -> str:
    """``text`` without the start-up notices (`NOTICE`), line by line."""
    return "".join(line for line in text.splitlines(keepends=True) if not NOTICE.match(line))


def filtered_lines(lines: Iterable[str]) -> Iterator[str]:
    """The lines of ``lines`` (str, each with its end) that are neither a `NOTICE`
    nor an `ECHO` or a `CONTINUATION` line of one."""
    hiding = False
    for line in lines:
        hiding = (hiding and bool(CONTINUATION.match(line))) or bool(ECHO.match(line))
        if not hiding and not NOTICE.match(line):
            yield line


def _forward(source, sink, wait=0.05):
    """Copies the file descriptor ``source`` to ``sink`` through `filtered_lines`
    until end of file. A partial line that stays partial for ``wait`` seconds (a
    progress bar's update, a prompt) goes on as it is: log lines come whole."""
    pending = b""
    while True:
        ready, _, _ = select.select([source], [], [], wait if pending else None)
        if not ready:
            os.write(sink, pending)
            pending = b""
            continue
        chunk = os.read(source, 65536)
        if not chunk:
            break
        lines = (pending + chunk).splitlines(keepends=True)
        pending = lines.pop() if not lines[-1].endswith((b"\n", b"\r")) else b""
        text = "".join(filtered_lines(line.decode("utf-8", "replace") for line in lines))
        if text:
            os.write(sink, text.encode("utf-8"))
    os.write(sink, pending)


def filter_stderr() -> None:
    """Runs file descriptor 2 through `filtered_lines` in a child process until
    every writer of the new descriptor 2 (this process, its children) is gone."""
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        # The child outlives an interrupt, so the parent's last words reach the
        # terminal, and holds nothing open that the parent's readers wait for.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.close(write_end)
        for descriptor in (0, 1):
            os.close(descriptor)
        try:
            _forward(read_end, 2)
        finally:
            os._exit(0)
    os.close(read_end)
    unfiltered = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)
    atexit.register(_drain, child, unfiltered)


def _drain(child, unfiltered, timeout=2.0):
    """At exit: puts the unfiltered stderr back (closing this process's end of
    the filter's pipe) and waits up to ``timeout`` seconds for the filter to pass
    on the last lines, so whoever reads the output after the tool's exit reads
    all of it."""
    sys.stderr.flush()
    os.dup2(unfiltered, 2)
    deadline = time.monotonic() + timeout
    while os.waitpid(child, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.01)


def import_tensorflow(argv: Sequence[str]) -> None:
    """Imports TensorFlow and probes its devices; unless ``argv`` asks for
    --verbosity 0 or more, first starts `filter_stderr` (see the module
    docstring). Does nothing once TensorFlow is imported (a tool run in process
    by the tests)."""
    if "tensorflow" in sys.modules:
        return
    verbose = requested_verbosity(argv) >= 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if verbose else "1")
    if not verbose:
        filter_stderr()
    import tensorflow as tf
    tf.config.list_physical_devices()
