"""bench_scale's --phases: every phase's workers in fresh processes, their figures as the
JSON the docs describe."""

import json
import os
import subprocess
import sys

import pytest

from tests.benchmarks.conftest import BENCHMARKS_DIR

ROWS, WORKERS = 20_000, 2


@pytest.mark.bench  # 12 worker processes, one after another in pairs: make bench runs it
def test_phases_write_each_phases_largest_worker_peak_and_the_share(tmp_path):
    """Each of the six phases has a peak RSS above the share and below 8 GiB (TensorFlow
    and a tiny network are about 1 GiB); the share is a worker's 10,000 rows x 269 bytes, the
    bank stored as bfloat16 (525 at float32)."""
    out = tmp_path / "phases.json"
    result = subprocess.run(
        [sys.executable, "bench_scale.py", "--phases", f"--rows={ROWS}",
         f"--workers={WORKERS}", f"--replicas={WORKERS}", f"--checkpoint_dir={tmp_path}",
         "--bank_dtype=bfloat16", f"--json={out}"], cwd=BENCHMARKS_DIR, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures) == {"rows", "workers", "bank_dtype", "share_bytes", "phases"}
    assert (figures["rows"], figures["workers"], figures["bank_dtype"]) == (
        ROWS, WORKERS, "bfloat16")
    assert figures["share_bytes"] == ROWS // WORKERS * (128 * 2 + 8 + 4 + 1)
    assert list(figures["phases"]) == ["build", "step", "density_refresh", "evaluation",
                                       "save", "restore"]
    for phase, peak in figures["phases"].items():
        assert figures["share_bytes"] < peak < 8 << 30, phase
    assert not [name for name in os.listdir(tmp_path) if name.startswith("bench-scale-")]
