"""Peak RSS growth of this process, and figures read from a fresh process."""

import numpy as np
import pytest

import peak_rss  # benchmarks/ is on the import path (conftest.py)


def test_the_peak_grows_by_what_is_allocated_after_the_reset():
    baseline = peak_rss.reset_peak_rss()
    block = np.ones(64 * 2**20 // 8)  # 64 MiB, every page written
    growth = peak_rss.peak_growth_mib(baseline)
    del block
    assert 60 <= growth <= 80


def test_figures_are_the_last_line_of_a_fresh_process(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text("import sys\nprint('starting')\nprint('{\"growth_mib\": %s}' % sys.argv[1])\n")
    assert peak_rss.fresh_process_figures(str(script), ["12.5"], timeout=60) == \
        {"growth_mib": 12.5}


def test_a_failing_process_raises_with_its_stderr(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text("import sys\nsys.exit('out of memory in the probe')\n")
    with pytest.raises(RuntimeError, match="exited with 1:\nout of memory in the probe"):
        peak_rss.fresh_process_figures(str(script), [], timeout=60)


def test_a_process_over_its_memory_limit_is_stopped(tmp_path):
    """It holds 400 MiB and then sleeps a minute: stopped within the poll, not the minute."""
    script = tmp_path / "probe.py"
    script.write_text("import time\nimport numpy as np\nblock = np.ones(400 * 2**20 // 8)\n"
                      "time.sleep(60)\n")
    with pytest.raises(peak_rss.MemoryLimitExceeded, match="over 204800 KiB"):
        peak_rss.fresh_process_figures(str(script), [], timeout=50, rss_limit_kib=200 * 1024)
