"""A quiet start for every tool: each calls `import_tensorflow(sys.argv)` before anything
imports TensorFlow. Unless ``--verbosity`` is 0 or more, stderr (descriptor 2) then runs
through a filter process that drops TensorFlow's start-up notices (`NOTICE`, which
``TF_CPP_MIN_LOG_LEVEL`` does not all reach) and runtime lines that only echo an error the
tool reports itself (`ECHO`), passing every other line on as it comes. Imports nothing
heavy."""

import atexit
import os
import re
import time
import select
import signal
import sys
from typing import Iterable, Iterator, Sequence

#: Start-up lines hidden without --verbosity (absl INFO lines, the CPU-feature notice, CUDA's
#: failed probe without a GPU).
NOTICE = re.compile(r"^(I\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] |"
                    r"WARNING: All log messages before absl::InitializeLog\(\) |"
                    r"To enable the following instructions: |"
                    r"E\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] failed call to cuInit: )")


def requested_verbosity(argv: Sequence[str]) -> int:
    """The --verbosity (or -v) on the command line, the last one given (-1 if none; flagfiles
    are not read)."""
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
            pass  # absl reports the bad value
    return level


#: Runtime lines hidden without --verbosity, with their `CONTINUATION` lines: echoes of an
#: error the tool reports itself (libjpeg's on a truncated JPEG among them), and a notice
#: about a dataset TensorFlow builds for multi-worker input.
ECHO = re.compile(r"^([WE]\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] "
                  r"(Local rendezvous is aborting with status: |"
                  r"Input of GeneratorDatasetOp::Dataset will not be optimized |"
                  r"BaseCollectiveExecutor::StartAbort |"
                  r".*CANCELLED: GetNextFromShard|"
                  r"Premature end of JPEG data\. )|"
                  r"Improper call to JPEG library in state \d+$|"
                  r"Input file read error$)")
#: Lines of a runtime message after its first.
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
    """Copies descriptor ``source`` to ``sink`` through `filtered_lines` until end of file;
    a partial line (a progress bar's update) goes on as it is after ``wait`` seconds."""
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
        # It outlives an interrupt and holds nothing open that the parent's readers wait for.
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
    """At exit: puts the unfiltered stderr back and waits up to ``timeout`` seconds for the
    filter to pass on the last lines."""
    sys.stderr.flush()
    os.dup2(unfiltered, 2)
    deadline = time.monotonic() + timeout
    while os.waitpid(child, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.01)


def import_tensorflow(argv: Sequence[str]) -> None:
    """Imports TensorFlow and probes its devices, after `filter_stderr` unless ``argv``
    asks for --verbosity 0 or more; nothing once TensorFlow is imported."""
    if "tensorflow" in sys.modules:
        return
    verbose = requested_verbosity(argv) >= 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if verbose else "1")
    if not verbose:
        filter_stderr()
    import tensorflow as tf
    tf.config.list_physical_devices()
