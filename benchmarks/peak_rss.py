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


def status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB, e.g. "VmRSS" or "VmHWM"."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak_rss() -> int:
    """Resets the peak (VmHWM) to the current RSS and returns the current RSS in KiB."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status_kib("VmRSS")


def peak_growth_mib(baseline_kib: int) -> float:
    """MiB the peak rose above ``baseline_kib`` (from `reset_peak_rss`)."""
    return (status_kib("VmHWM") - baseline_kib) / 1024.0


def fresh_process_figures(script: str, args: list, timeout: float | None = None) -> dict:
    """The JSON object a fresh ``python script *args`` prints as its last line.

    Raises `RuntimeError` with the process's stderr when it fails, and
    `subprocess.TimeoutExpired` after ``timeout`` seconds (None: no limit).
    """
    result = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)} exited with {result.returncode}:\n"
                           f"{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])
