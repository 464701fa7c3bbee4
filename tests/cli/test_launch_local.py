"""tools/launch_local.py: workers with their TF_CONFIG, prefixed output, and every
worker stopped when one fails, on timeout and on SIGTERM. The workers are tiny
Python commands (no TensorFlow), so each test takes seconds."""

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.cli.tool_main import ROOT, load_tool, run_main, tool_path

launch_local = load_tool("launch_local.py")

# Reads its TF_CONFIG and prints it with its pid.
PRINT_CONFIG = ("import json, os; print('pid', os.getpid()); "
                "print('config', os.environ['TF_CONFIG']); "
                "import sys; print('to stderr', file=sys.stderr)")

# Worker 1 writes its pid to the file argv[1] and sleeps; worker 0 waits for
# that file, then exits with the code argv[2] (so worker 1 surely runs).
ONE_FAILS = """
import json, os, sys, time
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
print("pid", os.getpid())
if index == 1:
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(60)
deadline = time.time() + 30
while not os.path.exists(sys.argv[1]) and time.time() < deadline:
    time.sleep(0.05)
sys.exit(int(sys.argv[2]))
"""

SLEEP = "import os, time; print('pid', os.getpid()); time.sleep(60)"


def _pids(out):
    """{worker index: pid} printed as ``[worker I] pid N``."""
    return {int(i): int(pid) for i, pid in re.findall(r"^\[worker (\d+)\] pid (\d+)$", out, re.M)}


def _gone(pid):
    """Whether process ``pid`` has ended (a zombie left to an init that does not
    reap counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_two_workers_get_one_cluster_on_127_0_0_1_and_their_own_index():
    code, out, err = run_main(launch_local, "--workers=2", "--", sys.executable, "-c",
                              PRINT_CONFIG)
    assert code == 0, err
    configs = {}
    for index, text in re.findall(r"^\[worker (\d+)\] config (.*)$", out, re.M):
        configs[int(index)] = json.loads(text)
    assert sorted(configs) == [0, 1]
    addresses = configs[0]["cluster"]["worker"]
    assert len(addresses) == 2 and len(set(addresses)) == 2
    assert all(re.fullmatch(r"127\.0\.0\.1:\d+", address) for address in addresses)
    for index, config in configs.items():
        assert config == {"cluster": {"worker": addresses},
                          "task": {"type": "worker", "index": index}}
    assert sorted(_pids(out)) == [0, 1]
    assert sorted(err.splitlines()) == ["[worker 0] to stderr", "[worker 1] to stderr"]


def test_a_failing_worker_stops_the_others_and_its_code_is_the_launchers(tmp_path):
    marker = str(tmp_path / "sleeper_pid")
    start = time.monotonic()
    code, out, err = run_main(launch_local, "--workers=2", "--", sys.executable, "-c",
                              ONE_FAILS, marker, "3")
    assert code == 3, err
    assert time.monotonic() - start < 20
    sleeper = int(open(marker).read())
    assert _pids(out)[1] == sleeper
    assert _gone(sleeper)
    assert err.splitlines()[-1] == \
        "launch_local: worker 0 exited with code 3; stopped the other workers."


def test_timeout_stops_every_worker_and_exits_124():
    start = time.monotonic()
    code, out, err = run_main(launch_local, "--workers=2", "--timeout_seconds=2", "--",
                              sys.executable, "-c", SLEEP)
    assert code == 124
    assert 2 <= time.monotonic() - start < 20
    pids = _pids(out)
    assert sorted(pids) == [0, 1] and all(_gone(pid) for pid in pids.values())
    assert err.splitlines()[-1] == \
        "launch_local: timed out after 2 seconds; stopped the workers."


@pytest.mark.parametrize("args, words", [
    ((), "give the worker command after --"),
    (("--workers=2", "--"), "give the worker command after --"),
    (("--workers=0", "--", "true"), "--workers must be at least 1"),
])
def test_no_command_or_no_worker_is_a_one_line_error(args, words):
    code, out, err = run_main(launch_local, *args)
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1 and words in err, err


def test_a_command_that_cannot_start_is_a_one_line_error(tmp_path):
    code, _, err = run_main(launch_local, "--workers=2", "--", str(tmp_path / "no_such_program"))
    assert code == 1
    assert err.splitlines() == [f"launch_local: cannot start worker 0 "
                                f"({tmp_path / 'no_such_program'}): No such file or directory"]


def test_help_explains_every_flag_and_the_command_after_the_separator():
    code, out, err = run_main(launch_local, "--help")
    assert code == 0 and err == ""
    for flag in ("--workers", "--timeout_seconds", "--[no]help"):
        assert flag in out
    # Named as installed (in this process no tools/NAME.py marked a checkout).
    assert "llp-launch-local --workers=2 -- llp-train" in out and "TF_CONFIG" in out


def test_sigterm_to_the_launcher_stops_the_workers_and_their_children():
    # Each worker starts a child that sleeps: the launcher stops whole process groups.
    worker = ("import os, subprocess, sys, time; "
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              "print('pid', os.getpid()); print('child', child.pid); time.sleep(60)")
    launcher = subprocess.Popen([sys.executable, tool_path("launch_local.py"), "--workers=2",
                                 "--", sys.executable, "-c", worker],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=ROOT)
    try:
        lines = []
        deadline = time.monotonic() + 30
        while sum(line.startswith("[worker") for line in lines) < 4 and \
                time.monotonic() < deadline:
            lines.append(launcher.stdout.readline())
        launcher.send_signal(signal.SIGTERM)
        out, err = launcher.communicate(timeout=30)
    finally:
        launcher.kill()
    out = "".join(lines) + out
    pids = [int(pid) for pid in re.findall(r"^\[worker \d\] (?:pid|child) (\d+)$", out, re.M)]
    assert len(pids) == 4, out
    assert launcher.returncode == 128 + signal.SIGTERM
    assert err.splitlines()[-1] == "launch_local: got SIGTERM; stopped the workers."
    deadline = time.monotonic() + 10  # the children are reaped by init, not by us
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(pid) for pid in pids)
