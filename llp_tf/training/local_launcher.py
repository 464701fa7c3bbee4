"""Several worker processes of one command on this machine, each with its own TF_CONFIG.

`launch` starts one worker per port, waits until all exit 0, one fails, the timeout passes
or a signal comes, then stops what is left (SIGTERM to each worker's process group, SIGKILL
after `GRACE_SECONDS`). POSIX only; imports no TensorFlow.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Sequence, TextIO

PROGRAM = "launch_local"
HOST = "127.0.0.1"
GRACE_SECONDS = 5.0
POLL_SECONDS = 0.1
# Seconds to wait for the rest of a stopped worker's output.
DRAIN_SECONDS = 5.0
TIMEOUT_EXIT_CODE = 124


class LaunchError(Exception):
    """A worker that cannot be started."""


def tf_config(ports: Sequence[int], index: int) -> str:
    """The TF_CONFIG JSON of worker ``index`` of a cluster on ``ports``."""
    return json.dumps({"cluster": {"worker": [f"{HOST}:{port}" for port in ports]},
                       "task": {"type": "worker", "index": index}})


def worker_command(command: Sequence[str]) -> list[str]:
    """``command``, run with this Python when its first word is a .py script."""
    if command[0].endswith(".py"):
        return [sys.executable, *command]
    return list(command)


def describe(returncode: int) -> tuple[int, str]:
    """(exit code to pass on, words) of a worker's ``Popen.returncode``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return 128 - returncode, f"was killed by {name} (exit code {128 - returncode})"
    return returncode, f"exited with code {returncode}"


def _forward(pipe, stream, prefix, lock):
    """Copies ``pipe`` to ``stream`` line by line, prefixed, under ``lock``; reads to the
    end even when ``stream`` fails, so the worker never blocks on a full pipe."""
    with pipe:
        for raw in iter(pipe.readline, b""):
            line = raw.decode("utf-8", "replace")
            if not line.endswith("\n"):
                line += "\n"
            with lock:
                try:
                    stream.write(prefix + line)
                    stream.flush()
                except (OSError, ValueError):
                    pass  # a closed stream: the output is lost, not the worker


def _signal_group(process, signum):
    """Sends ``signum`` to the process group of ``process``, if any member is left."""
    try:
        os.killpg(process.pid, signum)
    except OSError:
        pass  # the group is gone


class Workers:
    """The worker processes of one launch and the threads forwarding their output."""

    def __init__(self, stdout: TextIO, stderr: TextIO) -> None:
        self.stdout, self.stderr = stdout, stderr
        self.lock = threading.Lock()
        self.processes, self.threads = [], []

    def write(self, text: str) -> None:
        """Writes a line of the launcher's own to its stderr, between whole worker lines."""
        with self.lock:
            self.stderr.write(text + "\n")
            self.stderr.flush()

    def start(self, command: Sequence[str], ports: Sequence[int]) -> None:
        """Starts one worker per port, each in its own process group (Ctrl-C reaches the
        launcher only). LaunchError: the command cannot be run."""
        for index in range(len(ports)):
            env = dict(os.environ, TF_CONFIG=tf_config(ports, index))
            env.setdefault("PYTHONUNBUFFERED", "1")
            try:
                process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           start_new_session=True)
            except OSError as error:
                raise LaunchError(f"cannot start worker {index} ({' '.join(command)}): "
                                  f"{error.strerror or error}") from None
            self.processes.append(process)
            prefix = f"[worker {index}] "
            for pipe, stream in ((process.stdout, self.stdout), (process.stderr, self.stderr)):
                thread = threading.Thread(target=_forward, args=(pipe, stream, prefix, self.lock),
                                          name=f"{PROGRAM}-worker-{index}", daemon=True)
                thread.start()
                self.threads.append(thread)

    def poll(self) -> list[int | None]:
        """The workers' return codes, None for those still running."""
        return [process.poll() for process in self.processes]

    def stop(self, grace_seconds: float) -> None:
        """Stops every worker and all it started (SIGTERM, SIGKILL after ``grace_seconds``),
        then waits for the rest of their output."""
        running = [process for process in self.processes if process.poll() is None]
        for process in running:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        for process in running:
            with contextlib.suppress(subprocess.TimeoutExpired):  # killed below
                process.wait(max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            _signal_group(process, signal.SIGKILL)
        for process in self.processes:
            try:
                process.wait(DRAIN_SECONDS)
            except subprocess.TimeoutExpired:
                pass  # not even SIGKILL ended it (a process in the kernel): nothing more to do
        deadline = time.monotonic() + DRAIN_SECONDS
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def wait(workers: Workers, timeout_seconds: float,
         received: list[int]) -> tuple[int, str | None]:
    """(exit code, None or the launcher's last line) once all workers exit 0, one fails,
    ``timeout_seconds`` (0: no limit) pass or a signal number appears in ``received``."""
    deadline = time.monotonic() + timeout_seconds if timeout_seconds > 0 else None
    while True:
        codes = workers.poll()
        for index, code in enumerate(codes):
            if code not in (None, 0):
                exit_code, words = describe(code)
                return exit_code, (f"{PROGRAM}: worker {index} {words}; stopped the other "
                                   "workers.")
        if all(code == 0 for code in codes):
            return 0, None
        if received:
            name = signal.Signals(received[0]).name
            return 128 + received[0], f"{PROGRAM}: got {name}; stopped the workers."
        if deadline is not None and time.monotonic() >= deadline:
            return TIMEOUT_EXIT_CODE, (f"{PROGRAM}: timed out after {timeout_seconds:g} "
                                       "seconds; stopped the workers.")
        time.sleep(POLL_SECONDS)


class _CatchSignals:
    """Within: SIGINT, SIGTERM and SIGHUP append their number to ``received`` instead of
    ending the launcher (main thread only; an ignored signal stays ignored)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, received: list[int]) -> None:
        self.received, self.previous = received, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                if signal.getsignal(signum) is signal.SIG_IGN:
                    continue
                self.previous[signum] = signal.signal(
                    signum, lambda number, frame: self.received.append(number))
        return self

    def __exit__(self, *exc_info):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def launch(command: Sequence[str], ports: Sequence[int], timeout_seconds: float, stdout: TextIO,
           stderr: TextIO) -> int:
    """Runs one worker of ``command`` per port; returns the exit code: 0, the failed
    worker's (128+N after signal N), `TIMEOUT_EXIT_CODE`, or 128+N after a signal N."""
    workers, received = Workers(stdout, stderr), []
    code, message = 1, None
    with _CatchSignals(received):
        try:
            workers.start(worker_command(command), ports)
            code, message = wait(workers, timeout_seconds, received)
        except LaunchError as error:
            message = f"{PROGRAM}: {error}"
        finally:
            workers.stop(GRACE_SECONDS)
    if message:
        workers.write(message)
    return code
