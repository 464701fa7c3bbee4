"""Every benchmark has a ``main(argv, stdout, stderr)``, like the tools, that
runs in this process and answers --help with its description and every flag;
the ones `make bench` runs take --full for the sizes of docs/performance.md's figures."""

import inspect
import os
import re

from tests.benchmarks.conftest import BENCHMARKS_DIR
from tests.cli.tool_main import ROOT, load_script, run_main


def _benchmarks():
    return sorted(name for name in os.listdir(BENCHMARKS_DIR) if name.endswith(".py")
                  and "__main__" in open(os.path.join(BENCHMARKS_DIR, name)).read())


def _in_make_bench():
    """The scripts the Makefile's bench target runs, in its order."""
    with open(os.path.join(ROOT, "Makefile")) as f:
        recipe = f.read().split("\nbench:")[1].split("\n\n")[0]
    return re.findall(r"^\t\$\(PY\) benchmarks/(\w+\.py)$", recipe, re.MULTILINE)


def test_the_benchmarks_are_the_scripts_with_a_main_and_make_bench_runs_all_but_two():
    assert _benchmarks() == ["bench_bank_checkpoint.py", "bench_bank_dtype.py", "bench_core.py",
                             "bench_gpu_model.py", "bench_input.py", "bench_probe.py",
                             "bench_scale.py", "bench_train_step.py"]
    assert _in_make_bench() == ["bench_core.py", "bench_input.py", "bench_train_step.py",
                                "bench_probe.py", "bench_scale.py", "bench_bank_checkpoint.py"]


def test_every_benchmark_answers_help_with_its_description_and_flags():
    for name in _benchmarks():
        module = load_script(os.path.join(BENCHMARKS_DIR, name), "_benchmark")
        assert list(inspect.signature(module.main).parameters)[:3] == \
            ["argv", "stdout", "stderr"], name
        code, out, err = run_main(module, "--help")
        assert code == 0 and err == "", (name, err)
        assert out.startswith(module.__doc__.strip().splitlines()[0]), name
        values = module.make_flags()
        flag_names = {values[name].name for name in values}  # short names to long ones
        assert {"help", "verbosity"} <= flag_names, name
        assert ("full" in flag_names) == (name in _in_make_bench()), name
        for flag in flag_names:
            assert f"--{flag}:" in out or f"--[no]{flag}:" in out, (name, flag)
