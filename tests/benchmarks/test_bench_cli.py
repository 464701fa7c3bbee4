"""The benchmarks' --full: the sizes of docs/performance.md's figures, for every
size flag not given."""

import io

from absl import flags

import bench_cli  # benchmarks/ is on the import path (conftest.py)

FULL_SIZES = {"bank": 128_000, "sizes": ["5000", "40000"]}


def _sizes(*args):
    """(--bank, --sizes, --threads) the body of a benchmark sees after ``args``."""
    values = bench_cli.new_flag_values(FULL_SIZES)
    flags.DEFINE_integer("bank", 32_000, "N.", flag_values=values)
    flags.DEFINE_list("sizes", ["2500", "20000"], "Sizes.", flag_values=values)
    flags.DEFINE_integer("threads", 2, "Threads.", flag_values=values)
    seen = []
    code = bench_cli.run(["bench", *args], io.StringIO(), io.StringIO(), values, "usage",
                         lambda v, out, err: seen.append((v.bank, v.sizes, v.threads)),
                         FULL_SIZES)
    assert code == 0
    return seen[0]


def test_full_sets_the_full_sizes_of_the_flags_not_given():
    assert _sizes() == (32_000, ["2500", "20000"], 2)
    assert _sizes("--full") == (128_000, ["5000", "40000"], 2)
    assert _sizes("--full", "--bank=64000", "--threads=1") == (64_000, ["5000", "40000"], 1)


def test_full_names_its_sizes_in_the_help():
    values = bench_cli.new_flag_values(FULL_SIZES)
    assert "--bank=128000 --sizes=5000,40000" in values["full"].help
