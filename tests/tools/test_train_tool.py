import os
import subprocess
import sys

from llp_tf.training.config import settings_fields

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "tools", "train.py")


def _run(*args):
    return subprocess.run([sys.executable, TRAIN, *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_unknown_regime_lists_the_known_ones():
    result = _run("--regime=r18_p50_q100")
    assert result.returncode == 2
    assert "Unknown regime 'r18_p50_q100'" in result.stderr
    for name in ("demo", "r18_p01_q100", "r18_p10_q30", "r50_p10_q100"):
        assert name in result.stderr


def test_every_regime_flagfile_parses_into_a_valid_config(tmp_path):
    regimes = sorted(f[:-6] for f in os.listdir(os.path.join(ROOT, "flags"))
                     if f.endswith(".flags"))
    assert len(regimes) == 9
    # A bad label percentage after the regime overrides it and is reported as
    # one line: proof that the regime's own settings were accepted first.
    for regime in regimes:
        result = _run(f"--regime={regime}", f"--run_dir={tmp_path}", "--label_percent=0")
        assert result.returncode == 1, (regime, result.stderr)
        assert "error: Invalid training settings: label_percent must lie in (0, 100]" in \
            result.stderr, regime
        assert "Traceback" not in result.stderr


def test_helpfull_documents_a_flag_for_every_setting():
    result = _run("--helpfull")  # absl exits with status 1 after printing help
    assert "Train with Local Label Propagation" in result.stdout
    assert "Traceback" not in result.stderr
    for name in settings_fields():
        assert f"--{name}:" in result.stdout or f"--[no]{name}:" in result.stdout, name


def test_fewer_examples_than_one_global_batch_is_one_error_line_and_writes_nothing(
        tmp_path, stripes):
    run_dir = tmp_path / "run"
    result = _run(f"--dataset={stripes}", f"--run_dir={run_dir}", "--image_size=16",
                  "--label_percent=10", "--global_batch_size=256", "--epochs=10")
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines == [
        "error: The run uses 160 training examples, fewer than one global batch "
        "(--global_batch_size=256), so an epoch would have no step. Give "
        "--global_batch_size=160 or less, or use more data (--data_percent, or a larger "
        "dataset)."]
    assert "Traceback" not in result.stderr
    assert not run_dir.exists() or not os.listdir(run_dir)


def test_every_tool_runs_in_process_and_answers_help():
    from tests.tools.tool_main import load_tool, run_main

    tools = sorted(name for name in os.listdir(os.path.join(ROOT, "tools"))
                   if name.endswith(".py") and not name.startswith("bench_")
                   and name not in ("config_flags.py", "tool_cli.py"))
    assert tools == ["analyze.py", "build_tfrecords.py", "compare_propagation.py", "export.py",
                     "linear_probe.py", "make_splits.py", "predict.py", "train.py"]
    for name in tools:
        code, out, err = run_main(load_tool(name), "--help")
        assert code == 0 and "Flags:" in out, (name, err)
