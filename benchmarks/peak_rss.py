"""Peak resident memory of one piece of work, for the memory benchmarks (Linux).

A benchmark runs each measurement in a fresh process of itself
(`fresh_process_figures`), where `reset_peak_rss` writes 5 to
/proc/self/clear_refs, which resets the peak (VmHWM) to the current
resident set; after the work, `peak_growth_mib` is how far the peak rose
above that baseline, printed as the last line, in JSON.
"""

import json
import subprocess
import sys
import tempfile
import time


def status_kib(field: str, process: str = "self") -> int:
    """A field of /proc/<process>/status in KiB, e.g. "VmRSS" or "VmHWM"."""
    with open(f"/proc/{process}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{process}/status")


def reset_peak_rss() -> int:
    """Resets the peak (VmHWM) to the current RSS and returns the current RSS in KiB."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status_kib("VmRSS")


def peak_growth_mib(baseline_kib: int) -> float:
    """MiB the peak rose above ``baseline_kib`` (from `reset_peak_rss`)."""
    return (status_kib("VmHWM") - baseline_kib) / 1024.0


class MemoryLimitExceeded(RuntimeError):
    """A fresh process's RSS went over its limit, and it was stopped."""


def fresh_process_figures(script: str, args: list, timeout: float | None = None,
                          rss_limit_kib: int | None = None) -> dict:
    """The JSON object a fresh ``python script *args`` prints as its last line.

    Raises `RuntimeError` with the process's stderr when it fails,
    `subprocess.TimeoutExpired` after ``timeout`` seconds (None: no limit), and
    `MemoryLimitExceeded` once its RSS exceeds ``rss_limit_kib`` (None: no limit;
    checked every 0.1 s, the process then killed).
    """
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen([sys.executable, script, *args], stdout=stdout,
                                   stderr=stderr, text=True)
        start = time.monotonic()
        try:
            while process.poll() is None:
                if rss_limit_kib is not None and rss_kib(process.pid) > rss_limit_kib:
                    raise MemoryLimitExceeded(f"{script} {' '.join(args)} went over "
                                              f"{rss_limit_kib} KiB of RSS")
                if timeout is not None and time.monotonic() - start > timeout:
                    raise subprocess.TimeoutExpired(process.args, timeout)
                time.sleep(0.1)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        stdout.seek(0)
        stderr.seek(0)
        if process.returncode != 0:
            raise RuntimeError(f"{script} {' '.join(args)} exited with {process.returncode}:\n"
                               f"{stderr.read()}")
        return json.loads(stdout.read().strip().splitlines()[-1])


def rss_kib(pid: int) -> int:
    """VmRSS of process ``pid`` in KiB (0 once it has exited)."""
    try:
        return status_kib("VmRSS", str(pid))
    except (FileNotFoundError, RuntimeError):  # exited between the poll and the read
        return 0
