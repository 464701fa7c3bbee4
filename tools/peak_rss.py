"""Peak resident memory of this process, for the memory benchmarks (Linux).

`reset_peak_rss` writes 5 to /proc/self/clear_refs, which resets the peak
(VmHWM) to the current resident set; after some work, `peak_growth_mib` is
how far the peak rose above that baseline.
"""


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
