import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "linear_probe.py")


def _run(*args):
    # A subprocess: the tools share absl's global flags, and several of them
    # define --run_dir or --dataset, so they cannot all be imported in one process.
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_probe_writes_json_and_prints_both_trunks(tiny_llp_run, stripes, tmp_path):
    run_dir = shutil.copytree(tiny_llp_run, tmp_path / "run")  # the default output goes there
    result = _run(f"--run_dir={run_dir}", f"--dataset={stripes}", "--epochs=3", "--patience=2",
                  "--batch_size=32")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    path = run_dir / f"linear_probe_folder_{os.path.basename(stripes.split(':', 1)[1])}.json"
    assert f"Wrote {path}" in result.stdout
    assert not os.path.exists(str(path) + ".tmp")
    with open(path) as f:
        payload = json.load(f)
    assert (payload["num_classes"], payload["num_train"], payload["num_validation"]) == \
        (4, 160, 40)
    assert payload["step"] == 15 and payload["image_size"] == 16
    assert payload["settings"]["learning_rate"] == 0.01
    assert payload["settings"]["batch_size"] == 32 and payload["settings"]["patience"] == 2
    for trunk in ("trained", "random"):
        probe = payload[trunk]
        assert 1 <= probe["epochs"] <= 3 and len(probe["history"]) == probe["epochs"]
        # The reported accuracy is the last epoch's, a multiple of 1/40.
        assert probe["top1"] == probe["history"][-1]["top1"]
        assert round(probe["top1"] * 40, 6) == int(round(probe["top1"] * 40))
        # The printed row shows the JSON's numbers.
        row = re.search(rf"^{trunk}\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+\d+\s+(\d+)\s+(\d+)",
                        result.stdout, re.M)
        assert row, result.stdout
        assert float(row.group(1)) == round(100 * probe["top1"], 2)
        assert float(row.group(2)) == round(100 * probe["top5"], 2)
        assert (int(row.group(3)), int(row.group(4))) == (probe["epochs"], probe["drops"])
    # The trunks differ, so their features and readouts do.
    assert payload["trained"]["history"] != payload["random"]["history"]
    assert "features of" in result.stdout  # progress of the extraction


def test_not_a_run_directory_is_a_clear_error(tmp_path, stripes):
    result = _run(f"--run_dir={tmp_path}", f"--dataset={stripes}")
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and "not a training run directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_dataset_is_a_clear_error_and_writes_nothing(tiny_llp_run, tmp_path):
    output = tmp_path / "probe.json"
    result = _run(f"--run_dir={tiny_llp_run}", "--dataset=places205", f"--output={output}")
    assert result.returncode == 1
    assert "error: Unknown dataset 'places205'" in result.stderr
    assert "Traceback" not in result.stderr and not output.exists()


def test_bad_numbers_and_help():
    result = _run("--run_dir=x", "--dataset=digits", "--epochs=0", "--learning_rate=-1")
    assert result.returncode == 1
    assert "error: Invalid linear-probe settings: epochs must be a positive integer" in \
        result.stderr and "learning_rate must be a positive number" in result.stderr
    result = _run("--help")
    for flag in ("run_dir", "checkpoint", "dataset", "data_dir", "batch_size", "epochs",
                 "learning_rate", "patience", "max_drops", "seed", "skip_random", "output",
                 "standardize", "momentum"):
        assert re.search(rf"--(\[no\])?{flag}: \S", result.stdout), flag
