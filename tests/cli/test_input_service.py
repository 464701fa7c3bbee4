"""tools/input_service.py: its flags and their errors in this process; started
as a process on 127.0.0.1, it feeds a tiny training run that ends in the same
state as with local input (one service worker keeps the order), and SIGTERM
stops it cleanly."""

import io
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.runs import assert_same_state, tiny_config
from tests.cli.tool_main import ROOT, load_tool, run_main, tool_path

input_service = load_tool("input_service.py")

FLAGS = ("dispatcher_address", "dispatcher_port", "workers", "worker_ports", "host",
         "worker_addresses", "work_dir")
# Seconds the launcher may take to announce itself, and to stop.
START_SECONDS = 60
STOP_SECONDS = 20


def test_help_explains_every_flag():
    code, out, err = run_main(input_service, "--help")
    assert code == 0 and err == ""
    for name in FLAGS:
        assert f"--{name}:" in out or f"--{name}=" in out, name
    assert "--input_service=grpc://" in out


@pytest.mark.parametrize("args,match", [
    (["--dispatcher_address=nohost"], "--dispatcher_address: input_service must be"),
    (["--dispatcher_address=h:5050", "--workers=0"], "give --workers of 1 or more"),
    (["--dispatcher_address=h:5050", "--work_dir=/tmp/x"], "not with --dispatcher_address"),
    (["--workers=2", "--worker_ports=5051"], "names 1 port"),
    (["--worker_ports=five"], "must be integers"),
    (["--workers=0"], "A dispatcher without workers"),
    (["--worker_ports=5051", "--worker_addresses=h1:5051"], "lacks 127.0.0.1:5051"),
])
def test_bad_flags_are_one_error_line(args, match):
    code, out, err = run_main(input_service, *args)
    assert code == 1 and out == ""
    assert err.startswith("error: ") and match in err and err.count("\n") == 1


def _announced_address(process, lines, timeout):
    """(the --input_service value the launcher prints within ``timeout`` seconds,
    the thread that collects its output lines into ``lines`` to its end)."""
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")),
                              daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        for line in list(lines):
            if line.startswith("train with --input_service="):
                return line.strip().split("=", 1)[1], reader
        time.sleep(0.1)
    pytest.fail(f"the launcher announced no address: {lines}")


@pytest.fixture
def launcher():
    """A launcher process with a dispatcher and one worker on 127.0.0.1."""
    port = input_service.command_line.free_ports(1)[0]
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [sys.executable, tool_path("input_service.py"), f"--dispatcher_port={port}",
         "--workers=1", "--host=127.0.0.1"], env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(STOP_SECONDS)


@pytest.mark.slow  # 20 s: a service process feeding a 3-epoch run
def test_a_run_fed_by_the_launched_service_trains_like_local_input(launcher, tiny_llp_run,
                                                                   stripes, tmp_path):
    process, port = launcher
    lines = []
    address, reader = _announced_address(process, lines, START_SECONDS)
    assert address == f"grpc://127.0.0.1:{port}"

    from llp_tf.training import run_training
    out = io.StringIO()
    run_training(tiny_config(tmp_path, stripes, input_service=address), out)
    assert f"Training batches from the tf.data service at {address}" in out.getvalue()
    # The shared run has the same settings with local input.
    assert_same_state(str(tmp_path / "run"), tiny_llp_run)

    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(STOP_SECONDS) == 0, lines
    reader.join(STOP_SECONDS)
    assert lines[-1] == "input_service: stopped.\n"
