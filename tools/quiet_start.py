"""A quiet start for every tool: TensorFlow's start-up notices hidden.

Importing TensorFlow and probing for GPUs prints, from TensorFlow's C++
side, lines that tell a user nothing: the oneDNN notice, CUDA probing on a
machine without a GPU, the CPU-feature notice, and absl's line about log
messages before ``absl::InitializeLog()``. They are printed before any flag
is parsed, and ``TF_CPP_MIN_LOG_LEVEL`` does not reach all of them in
TensorFlow 2.21.

So each tool calls `import_tensorflow(sys.argv)` before it imports anything
that imports TensorFlow. Unless ``--verbosity`` (``-v``) is 0 or more on the
command line, the import and the device probe run with the process's stderr
(file descriptor 2) captured, and every captured line that is not such a
notice is written back: TensorFlow's warnings and errors still show. Set
in the environment, ``TF_CPP_MIN_LOG_LEVEL`` is respected; otherwise it is
1 (TensorFlow's C++ INFO lines hidden, warnings shown) or, with
``--verbosity`` of 0 or more, 0.

This module imports nothing heavy: it must run first.
"""

import os
import re
import sys
import tempfile

#: Start-up lines hidden without --verbosity: absl INFO lines (``I0000 ...``),
#: absl's pre-initialisation banner, the CPU-feature notice's second line, and
#: CUDA's failed probe on a machine without a GPU driver.
NOTICE = re.compile(r"^(I\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] |"
                    r"WARNING: All log messages before absl::InitializeLog\(\) |"
                    r"To enable the following instructions: |"
                    r"E\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] failed call to cuInit: )")


def requested_verbosity(argv):
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


def without_notices(text):
    """``text`` without the start-up notices (`NOTICE`), line by line."""
    return "".join(line for line in text.splitlines(keepends=True) if not NOTICE.match(line))


def _import_and_probe():
    import tensorflow as tf
    tf.config.list_physical_devices()


def import_tensorflow(argv):
    """Imports TensorFlow and probes its devices, quietly unless ``argv`` asks for
    --verbosity 0 or more (see the module docstring). Does nothing once
    TensorFlow is imported (a tool run in process by the tests)."""
    if "tensorflow" in sys.modules:
        return
    verbose = requested_verbosity(argv) >= 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if verbose else "1")
    if verbose:
        _import_and_probe()
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            _import_and_probe()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            sys.stderr.write(without_notices(captured.read().decode("utf-8", "replace")))
            sys.stderr.flush()
