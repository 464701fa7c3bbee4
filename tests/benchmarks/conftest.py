"""The benchmarks are scripts run from benchmarks/, where they import their
shared modules (`bench_cli`, `peak_rss`, `step_cost`); tests load them by
path or import those modules, so benchmarks/ goes on the import path."""

import os
import sys

BENCHMARKS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "benchmarks")
if BENCHMARKS_DIR not in sys.path:
    sys.path.insert(0, BENCHMARKS_DIR)
