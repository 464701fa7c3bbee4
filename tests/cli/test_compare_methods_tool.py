"""tools/compare_methods.py: the table of methods x seeds, from real runs of tools/train.py."""

import json
import os
import sys

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


def test_unknown_method_and_a_failed_run_are_one_error_line(tmp_path, monkeypatch):
    tool = load_tool("compare_methods.py")
    code, _, err = run_main(tool, f"--runs_dir={tmp_path}", "--methods=nope")
    assert code == 1 and err == "error: unknown method 'nope'; known: " + ", ".join(
        load_tool("compare_methods.py").make_flags()["methods"].default) + ".\n"
    # A stand-in for tools/train.py that fails before its first evaluation, as a run
    # refusing its settings does (the real tool's runs: the slow tests).
    monkeypatch.setattr(tool, "TRAIN_COMMAND", (sys.executable, "-c", "import sys; sys.exit(1)"))
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


#: A stand-in for tools/train.py: writes what a finished run leaves (config.json, split.npz,
#: one evaluation in metrics.jsonl) for its flags, its top-1 read from TOP1 by (method, split
#: seed, label percent), after 10 epochs of 31 steps.
FAKE_TRAIN = '''
import json, os, sys
import numpy as np
from llp_tf.data.splits import regime
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
top1 = json.loads(os.environ["FAKE_TOP1"])[f"{flags['method']} {flags['split_seed']} "
                                           f"{flags['label_percent']}"]
os.makedirs(flags["run_dir"])
labels = np.repeat(np.arange(10), 400)
labelled, used = regime.make_splits(labels, float(flags["label_percent"]), 100,
                                    seed=int(flags["split_seed"]), num_classes=10)
regime.save_splits(os.path.join(flags["run_dir"], "split.npz"), labelled, used, labels)
with open(os.path.join(flags["run_dir"], "config.json"), "w") as f:
    json.dump({"method": {"name": flags["method"]}, "run": {"seed": int(flags["seed"])},
               "optimization": {"global_batch_size": 128},
               "methods": {"llp": {"warmup_epochs": 2}, "supervised": {},
                           "mean_teacher": {"unlabelled_ratio": 1}}}, f)
with open(os.path.join(flags["run_dir"], "metrics.jsonl"), "w") as f:
    f.write(json.dumps({"epoch": 10, "step": 310, "val_top1": top1}) + "\\n")
'''


def test_label_fractions_give_each_methods_interval_exposure_and_the_papers_verdict(
        tmp_path, monkeypatch):
    """Made-up top-1s on three labelled sets, chosen so that at p1 LLP is above supervised
    by far and supervised within 0.02 of Mean Teacher (holds), and at p10 Mean Teacher is
    below supervised (does not hold)."""
    import numpy as np

    from llp_tf.cli import compare_methods

    top1 = {"llp": ([0.80, 0.84, 0.82], [0.95, 0.96, 0.94]),
            "supervised": ([0.60, 0.65, 0.62], [0.90, 0.92, 0.91]),
            "mean_teacher": ([0.601, 0.651, 0.619], [0.85, 0.86, 0.84])}
    table = {f"{m} {s} {p}": values[i][s] for m, values in top1.items()
             for i, p in enumerate(("3.25", "32")) for s in range(3)}
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    monkeypatch.setenv("FAKE_TOP1", json.dumps(table))
    monkeypatch.setattr(compare_methods, "TRAIN_COMMAND", (sys.executable, str(script)))
    runs = tmp_path / "runs"
    code, out, err = run_main(load_tool("compare_methods.py"), f"--runs_dir={runs}",
                              "--label_fractions=p1,p10", "--methods=llp,supervised,mean_teacher")
    assert code == 0, err
    assert "--label_percent=3.25 --split_seed=1" in err and "--seed=1" in err
    result = json.loads((runs / "label_fractions.json").read_text())
    assert result["seeds"] == ["0", "1", "2"] and result["equivalence_margin"] == 0.02
    p1, p10 = result["fractions"]["p1"], result["fractions"]["p10"]
    assert (p1["label_percent"], p1["labelled_per_class"]) == (3.25, 13)
    assert (p10["label_percent"], p10["labelled_per_class"]) == (32, 128)
    t2 = 4.302652729749462  # Student t_{0.975} at 2 degrees of freedom, (2p - 1) / sqrt(2p(1-p))
    for name, (values, _) in top1.items():
        x = np.array(values)
        half = t2 * x.std(ddof=1) / np.sqrt(3)
        row = p1["methods"][name]
        np.testing.assert_allclose([row["mean"], *row["ci95"]],
                                   [x.mean(), x.mean() - half, x.mean() + half], atol=1e-12)
    # Passes over each labelled image, by hand: 310 steps; supervised 128 a step over 130
    # labelled; Mean Teacher 64; LLP after 2 warm-up epochs of 31 steps, 128 x 130 / 4,000 a
    # step: 248 x 128 / 4,000.
    exposure = {name: p1["methods"][name]["labelled_exposure"]["0"] for name in top1}
    assert exposure == pytest.approx({"supervised": 310 * 128 / 130,
                                      "mean_teacher": 310 * 64 / 130,
                                      "llp": 248 * 128 / 4000}, rel=1e-12)
    claims = {c["claim"]: c for c in p1["claims"]}
    assert claims["llp > supervised"]["verdict"] == "holds"
    assert claims["supervised ≈ mean_teacher"]["verdict"] == "holds"
    assert claims["supervised ≈ mean_teacher"]["differences"] == pytest.approx(
        {"0": -0.001, "1": -0.001, "2": 0.001})
    assert p1["verdict"] == "holds"
    claims = {c["claim"]: c for c in p10["claims"]}
    assert claims["mean_teacher > supervised"]["verdict"] == "does not hold"
    assert claims["mean_teacher > supervised"]["relation"] == "<"
    assert p10["verdict"] == "does not hold"
    assert "- p1 as the paper orders it: holds" in out
    assert "| supervised | 0.600 | 0.650 | 0.620 | 0.623 |" in out


def test_an_unknown_label_fraction_is_one_error_line_before_any_run(tmp_path):
    code, out, err = run_main(load_tool("compare_methods.py"), f"--runs_dir={tmp_path}",
                              "--label_fractions=p1,p2")
    assert (code, out) == (1, "")
    assert err == ("error: Unknown label fraction 'p2'; known: p1, p3, p5, p10 (Table 1's 1%, "
                   "3%, 5% and 10% of ImageNet).\n")
    assert os.listdir(tmp_path) == []


@pytest.mark.slow  # 40 s: four tiny runs
def test_label_fractions_train_each_method_on_each_random_labelled_set(tmp_path):
    """Real runs of tools/train.py: each labelled set has 13 images a class, drawn by its
    split seed (other sets for other seeds, the same set for both methods), and the
    exposure is read from each run's own config and split."""
    import numpy as np

    from llp_tf.data.splits import regime

    code, out, err = run_main(load_tool("compare_methods.py"), f"--runs_dir={tmp_path}",
                              "--label_fractions=p1", "--methods=supervised,llp",
                              "--split_seeds=0,1", *SMALL)
    assert code == 0, err
    result = json.loads((tmp_path / "label_fractions.json").read_text())["fractions"]["p1"]
    sets = {}
    for method in ("supervised", "llp"):
        for seed in ("0", "1"):
            run = tmp_path / "p1" / f"{method}_split{seed}"
            config = json.loads((run / "config.json").read_text())
            assert (config["data"]["label_percent"], config["data"]["split_seed"],
                    config["run"]["seed"]) == (3.25, int(seed), int(seed))
            labelled, used = regime.read_split_indices(str(run / "split.npz"))
            sets[method, seed] = labelled
            assert len(labelled) == 130  # 13 of each of mnist5k's 10 classes
            rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            # SMALL: 1 epoch of 400 used images in batches of 50, 8 steps, the warm start's.
            passes = {"supervised": 8 * 50 / 130, "llp": 0.0}[method]
            assert result["methods"][method]["labelled_exposure"][seed] == pytest.approx(passes)
            assert result["methods"][method]["val_top1"][seed] == rows[-1]["val_top1"]
    assert np.array_equal(sets["supervised", "0"], sets["llp", "0"])
    assert not np.array_equal(sets["supervised", "0"], sets["supervised", "1"])
    assert [c["claim"] for c in result["claims"]] == ["llp > supervised"]
    assert "p1: 13 labelled images a class" in out
