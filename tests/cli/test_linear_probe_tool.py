import json
import os
import re
import shutil
import types

import pytest
from absl import flags

from tests.runs import file_contents
from tests.cli.tool_main import load_tool, run_main



@pytest.fixture(scope="module")
def tool():
    """The tool's module; importing it defines no flags."""
    return load_tool("linear_probe.py")


def _run(tool, *args):
    """Runs the tool's ``main`` in-process: (exit status, stdout, stderr) as attributes."""
    status, stdout, stderr = run_main(tool, *args)
    return types.SimpleNamespace(returncode=status, stdout=stdout, stderr=stderr)


def test_probe_writes_json_and_prints_both_trunks(tool, tiny_llp_run, stripes, tmp_path):
    run_dir = shutil.copytree(tiny_llp_run, tmp_path / "run")  # the default output goes there
    result = _run(tool, f"--run_dir={run_dir}", f"--dataset={stripes}", "--epochs=12",
                  "--patience=2", "--batch_size=32")
    assert result.returncode == 0, result.stderr
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
        assert 1 <= probe["epochs"] <= 12 and len(probe["history"]) == probe["epochs"]
        # The reported accuracy is the last epoch's, a fraction, a multiple of 1/40.
        assert probe["val_top1"] == probe["history"][-1]["val_top1"]
        assert round(probe["val_top1"] * 40, 6) == int(round(probe["val_top1"] * 40))
        assert 0 <= probe["val_top1"] <= probe["val_top5"] <= 1
        assert probe["best_val_top1"] >= probe["val_top1"] and 0 <= probe["top1"] <= 1
        # The printed row shows the JSON's numbers, as fractions too.
        row = re.search(rf"^{trunk}\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+\d+\s+(\d+)\s+(\d+)",
                        result.stdout, re.M)
        assert row, result.stdout
        assert float(row.group(1)) == round(probe["val_top1"], 4)
        assert float(row.group(2)) == round(probe["val_top5"], 4)
        assert (int(row.group(3)), int(row.group(4))) == (probe["epochs"], probe["drops"])
    # A concise summary: the start, each trunk's extraction and readout progress
    # (one line each off a terminal, for work this short), the table and the file.
    lines = result.stdout.splitlines()
    assert len(lines) <= 13, result.stdout
    assert sum("trunk readout epoch" in line for line in lines) == 2
    assert "saturated" not in result.stdout
    # The trunks differ, so their features and readouts do.
    assert payload["trained"]["history"] != payload["random"]["history"]
    assert "features of" in result.stdout  # progress of the extraction


def test_not_a_run_directory_is_a_clear_error(tool, tmp_path, stripes):
    result = _run(tool, f"--run_dir={tmp_path}", f"--dataset={stripes}")
    assert result.returncode == 1
    assert result.stderr == (f"error: --run_dir={tmp_path} (command line) is not a training run "
                             "directory: it has no config.json. Give the --run_dir of a run made "
                             "by llp-train.\n")
    (tmp_path / "file").write_text("")
    result = _run(tool, f"--run_dir={tmp_path / 'file'}", f"--dataset={stripes}")
    assert result.stderr == (f"error: --run_dir={tmp_path / 'file'} (command line) is not a "
                             "training run directory: it is a file. Give the --run_dir of a run "
                             "made by llp-train.\n")
    result = _run(tool, f"--run_dir={tmp_path / 'none'}", f"--dataset={stripes}")
    assert result.returncode == 1 and "it has no config.json" in result.stderr
    assert not (tmp_path / "none").exists()


def test_unknown_dataset_is_a_clear_error_and_writes_nothing(tool, tiny_llp_run, tmp_path):
    output = tmp_path / "probe.json"
    result = _run(tool, f"--run_dir={tiny_llp_run}", "--dataset=places205", f"--output={output}")
    assert result.returncode == 1
    assert "error: Unknown dataset 'places205'" in result.stderr
    assert result.stderr.startswith("error: ") and not output.exists()


def test_an_output_that_is_not_an_earlier_result_is_refused_before_any_work(
        tool, tiny_llp_run, stripes, tmp_path):
    run_dir = shutil.copytree(tiny_llp_run, tmp_path / "run")
    before = file_contents(run_dir)
    output = run_dir / "config.json"
    result = _run(tool, f"--run_dir={run_dir}", f"--dataset={stripes}", f"--output={output}")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (f"error: {output} exists and is not an earlier result of this tool "
                             "(a JSON object with run_dir, trained, random), so it is not "
                             "replaced: give another --output.\n")
    assert "Traceback" not in result.stderr
    assert file_contents(run_dir) == before


def test_every_flag_has_help(tool):
    options = flags.FlagValues()
    tool.define_flags(options)
    expected = {"run_dir", "checkpoint", "dataset", "data_dir", "batch_size", "epochs",
                "learning_rate", "momentum", "patience", "max_drops", "seed", "standardize",
                "skip_random", "output", "protocol", "cache_dir", "reuse_cache",
                "max_train_examples"}
    assert set(options) == expected
    assert all(len(options[name].help) > 20 for name in expected)
    assert options["learning_rate"].default == 0.01 and options["max_drops"].default == 2
    assert options["protocol"].default == "cached" and options["reuse_cache"].default
    assert options["max_train_examples"].default is None


def test_bad_numbers_are_one_clear_error(tool, tmp_path):
    result = _run(tool, f"--run_dir={tmp_path}", "--dataset=digits", "--epochs=0",
                  "--learning_rate=-1")
    assert result.returncode == 1
    assert result.stderr.startswith("error: Invalid linear-probe settings: epochs must be a "
                                    "positive integer")
    assert "learning_rate must be a positive number" in result.stderr
    assert result.stderr.count("\n") == 1


def test_main_runs_in_process(tool, tmp_path):
    code, out, _ = run_main(tool, "--help")
    assert code == 0 and "--[no]standardize" in out and "Flags:" in out
    code, _, err = run_main(tool, "--dataset=digits")
    assert code == 1 and err.startswith("error: Give --run_dir")
    code, _, err = run_main(tool, "stray")
    assert code == 2 and err == "error: unexpected arguments: stray\n"


def test_caches_are_reused_and_a_cache_of_another_checkpoint_is_an_error(tool, tiny_llp_run,
                                                                         stripes, tmp_path):
    from llp_tf.after_training import run_loader
    common = [f"--run_dir={tiny_llp_run}", f"--dataset={stripes}", "--epochs=2",
              "--batch_size=32", "--skip_random", f"--cache_dir={tmp_path / 'caches'}"]
    first = _run(tool, *common, f"--output={tmp_path / 'a.json'}", "--max_train_examples=100")
    assert first.returncode == 0, first.stderr
    with open(tmp_path / "a.json") as f:
        payload = json.load(f)
    assert payload["protocol"] == "cached" and payload["max_train_examples"] == 100
    assert payload["num_train"] == 100 and payload["settings"]["max_train_examples"] == 100
    caches = payload["trained"]["cache"]
    assert caches["train"].startswith(str(tmp_path / "caches")) and \
        os.path.exists(os.path.join(caches["train"], "features.npy"))
    assert payload["trained"]["cache_reused"] == {"validation": False, "train": False}
    # Progress: the extraction, then the readout's bar over its epochs, ended by the last.
    assert "features of" in first.stdout
    assert re.search(r"trained trunk readout epoch 2/2 \[#+\] 8/8 .*val_top1", first.stdout)
    again = _run(tool, *common, f"--output={tmp_path / 'b.json'}", "--max_train_examples=100")
    assert again.returncode == 0 and "features of" not in again.stdout
    with open(tmp_path / "b.json") as f:
        assert json.load(f)["trained"]["cache_reused"] == {"validation": True, "train": True}
    older = run_loader.checkpoint_paths(tiny_llp_run)[0]
    other = _run(tool, *common, f"--checkpoint={older}", "--max_train_examples=100",
                 f"--output={tmp_path / 'c.json'}")
    assert other.returncode == 1 and "weights_sha256" in other.stderr
    assert "--noreuse_cache" in other.stderr and not (tmp_path / "c.json").exists()


def test_online_protocol_writes_its_settings(tool, tiny_llp_run, stripes, tmp_path):
    result = _run(tool, f"--run_dir={tiny_llp_run}", f"--dataset={stripes}", "--epochs=1",
                  "--batch_size=32", "--skip_random", "--protocol=online",
                  "--max_train_examples=64", f"--cache_dir={tmp_path}",
                  f"--output={tmp_path / 'online.json'}")
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "online.json") as f:
        payload = json.load(f)
    assert payload["protocol"] == "online" and payload["settings"]["protocol"] == "online"
    assert payload["num_train"] == 64 and payload["random"] is None
    assert list(payload["trained"]["cache"]) == ["validation"]
    assert "augmented" in payload["protocol_description"]
    bad = _run(tool, f"--run_dir={tiny_llp_run}", f"--dataset={stripes}", "--protocol=online",
               "--standardize")
    assert bad.returncode == 1 and "standardize applies to the cached protocol" in bad.stderr


def test_probe_reads_places205_as_distributed(tool, tiny_llp_run, tmp_path):
    import numpy as np
    from tests.data.sources.places205_fake import write_places
    truth = write_places(str(tmp_path / "places"))
    result = _run(tool, f"--run_dir={tiny_llp_run}", f"--dataset=places205:{tmp_path / 'places'}",
                  "--epochs=1", "--batch_size=8", "--skip_random",
                  f"--cache_dir={tmp_path / 'caches'}", f"--output={tmp_path / 'p.json'}")
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "p.json") as f:
        payload = json.load(f)
    assert payload["dataset"] == f"places205:{tmp_path / 'places'}"
    assert (payload["num_classes"], payload["num_train"], payload["num_validation"]) == \
        (205, 12, 4)
    # The cache holds one row per listed image (index = line), with its label.
    for split, key in (("train", "train"), ("validation", "val")):
        folder = payload["trained"]["cache"][split]
        assert np.load(os.path.join(folder, "features.npy")).shape[0] == len(truth[key])
        np.testing.assert_array_equal(np.load(os.path.join(folder, "index.npy")),
                                      np.arange(len(truth[key])))
        np.testing.assert_array_equal(np.load(os.path.join(folder, "labels.npy")),
                                      [label for _, label, _ in truth[key]])
