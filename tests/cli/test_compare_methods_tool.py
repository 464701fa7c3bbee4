"""tools/compare_methods.py: the table of methods x seeds, from real runs of tools/train.py."""

import json
import os

import pytest

from tests.cli.tool_main import load_tool, run_main

SMALL = ("--", "--data_percent=10", "--width=0.25", "--global_batch_size=50",
         "--warmup_epochs=1", "--lr_drop_epochs=1", "--steps_per_loop=4", "--epochs=1")


@pytest.mark.slow  # 35 s: four tiny runs
def test_runs_every_method_and_seed_and_a_finished_run_is_not_trained_again(tmp_path):
    tool = load_tool("compare_methods.py")
    args = (f"--runs_dir={tmp_path}", "--methods=supervised", "--seeds=0,1", *SMALL)
    code, out, err = run_main(tool, *args)
    assert code == 0, err
    table = json.loads((tmp_path / "methods_table.json").read_text())
    for seed in ("0", "1"):
        rows = [json.loads(line) for line in
                (tmp_path / f"supervised_seed{seed}" / "metrics.jsonl").read_text().splitlines()]
        assert table["val_top1"]["supervised"][seed] == rows[-1]["val_top1"]
        config = json.loads((tmp_path / f"supervised_seed{seed}" / "config.json").read_text())
        assert (config["method"]["name"], config["run"]["seed"]) == ("supervised", int(seed))
    assert table["metric"] == "val_top1"
    assert table["val_top1"]["supervised"]["0"] != table["val_top1"]["supervised"]["1"]
    assert out.splitlines()[2].startswith("| supervised | ")
    run = tmp_path / "supervised_seed0"

    def checkpoints():
        return {p.name: p.stat().st_mtime_ns for p in run.glob("checkpoints/*")}

    before = checkpoints()
    code, again, err = run_main(tool, *args)
    assert code == 0 and again == out
    assert checkpoints() == before  # nothing was written again


def test_unknown_method_and_a_failed_run_are_one_error_line(tmp_path):
    tool = load_tool("compare_methods.py")
    code, _, err = run_main(tool, f"--runs_dir={tmp_path}", "--methods=nope")
    assert code == 1 and err == "error: unknown method 'nope'; known: " + ", ".join(
        load_tool("compare_methods.py").make_flags()["methods"].default) + ".\n"
    code, _, err = run_main(tool, f"--runs_dir={tmp_path}", "--methods=llp", "--seeds=0",
                            "--", "--epochs=0")
    assert code == 1
    assert err.splitlines()[-1] == (f"error: llp, seed 0: llp-train exited 1 and left no "
                                    f"evaluation (run directory {tmp_path}/llp_seed0).")


def test_an_output_that_is_not_an_earlier_table_is_refused_before_any_run(tmp_path):
    tool = load_tool("compare_methods.py")
    output = tmp_path / "config.json"
    output.write_text('{"run": {"run_dir": "runs/demo"}}')
    code, out, err = run_main(tool, f"--runs_dir={tmp_path}", "--methods=supervised",
                              "--seeds=0", f"--output={output}")
    assert code == 1 and out == ""
    assert err == (f"error: {output} exists and is not an earlier result of this tool (a JSON "
                   "object with regime, seeds, metric), so it is not replaced: give another "
                   "--output.\n")
    assert "Traceback" not in err
    assert os.listdir(tmp_path) == ["config.json"]
    assert output.read_text() == '{"run": {"run_dir": "runs/demo"}}'
