import json
import os
import re
import types

import numpy as np
import pytest

from llp_tf.after_training.transduction import methods, protocol
from tests.cli.tool_main import load_tool, run_main

METHOD_TITLES = ("LLP (local kNN, K=10, T=25)", "weighted kNN (K=10)",
                 "label spreading (alpha=0.99, gamma=20)", "label propagation (gamma=20)",
                 "DMT normalized cut (K=5, 4 eig.)", "DLP diffusion (k=2)")


def _error_line(stderr):
    """The tool's one ``error: ...`` line (TensorFlow may log lines before it)."""
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def _run(*args):
    """The tool run in this process: (returncode, stdout, stderr) as attributes."""
    code, out, err = run_main(load_tool("compare_propagation.py"), *args)
    return types.SimpleNamespace(returncode=code, stdout=out, stderr=err)


@pytest.fixture(scope="module")
def feature_files(tmp_path_factory):
    """Paths of features [120, 16] (4 overlapping classes x 30, not unit length)
    and their labels."""
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((4, 16))
    features = 2.0 * (np.repeat(centres, 30, axis=0) + 1.2 * rng.standard_normal((120, 16)))
    labels = np.repeat(np.arange(4), 30)
    folder = tmp_path_factory.mktemp("features")
    np.save(folder / "feats.npy", features.astype(np.float32))
    np.save(folder / "labels.npy", labels)
    return folder / "feats.npy", folder / "labels.npy"


def test_features_files_print_the_table_and_write_json(feature_files):
    features, labels = feature_files
    result = _run(f"--features={features}", f"--labels={labels}", "--images_per_class=20",
                  "--labelled_per_class=3", "--draws=2", "--seed=3")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert ("note: the labels have 4 classes; using --classes=4 instead of the default 50 "
            "(give --classes to choose).\n") in out
    # The default sweep's 20 leaves no image to score at 20 a class.
    assert ("note: the sweep's 20 labelled per class need more than --images_per_class=20 "
            "images a class; left out.\n") in out
    assert "labelled per class: 3, 5, 10 (the same draws at each)" in out
    assert "3 labelled, draw 2/2:" in out and "10 labelled, draw 2/2:" in out
    table = out[out.index("== 3 labelled per class"):out.index("== 5 labelled per class")]
    for title in METHOD_TITLES:
        assert title in table
    assert "0.881 (LLP)" in table and "0.846 (LS)" in table and "0.877 (LP)" in table
    assert "0.892 (LP_DLP)" in table and "0.882 (LP_DMT)" in table
    assert re.search(r"weighted kNN \(K=10\) +[\d.]+ +[\d.]+ +not in Table 5\n", table)

    written = features.parent / "feats_propagation_comparison.json"
    assert f"wrote {written}" in out
    assert [p.name for p in features.parent.iterdir() if p.name.startswith(".")] == []
    report = json.loads(written.read_text())
    assert report["protocol"] == {"classes": 4, "classes_available": 4,
                                  "class_draw_vacuous": True, "images_per_class": 20,
                                  "labelled_per_class": 3, "labelled_per_class_sweep": [3, 5, 10],
                                  "draws": 2, "seed": 3, "feature_rows": 120, "feature_dim": 16}
    assert sorted(report["sweep"], key=int) == ["3", "5", "10"]
    # The same protocol run here gives the same accuracies, at each level on the same draws.
    for level in (3, 5, 10):
        expected = protocol.compare_methods(
            np.load(features), np.load(labels),
            methods.standard_methods(dlp_k=2, dmt_k=5, dmt_eigenvectors=4), 4, 20, level, 2,
            seed=3)
        entry = report["sweep"][str(level)]
        for method in expected.methods:
            np.testing.assert_allclose(entry["methods"][method.name]["accuracy_per_draw"],
                                       expected.accuracy[method.name])
            assert entry["methods"][method.name]["accuracy_mean"] == pytest.approx(
                expected.mean(method.name))
            if method.name != "local_knn":
                np.testing.assert_allclose(
                    entry["differences"][method.name]["per_draw"],
                    expected.accuracy["local_knn"] - expected.accuracy[method.name])
    # The top level is the claims' level, --labelled_per_class.
    assert report["labelled_per_class"] == 3
    assert report["methods"] == report["sweep"]["3"]["methods"]
    assert report["claims"] == report["sweep"]["3"]["claims"]
    assert list(report["claims"]) == ["comparable to LP_DMT", "slightly lower than DLP"]
    assert report["claims_rule"]["claims"]["comparable to LP_DMT"]["range"] == [-0.01, 0.01]
    assert report["methods"]["local_knn"]["paper_table5"] == {"name": "LLP", "accuracy": 0.881}
    assert report["methods"]["knn"]["paper_table5"] == "not in Table 5"
    assert report["methods"]["knn"]["in_paper_table5"] is False


def _arcs(folder):
    """Paths of features [120, 8] and labels: 4 classes of 30 unit vectors evenly spaced on an
    arc of 0.6 rad, each class in its own pair of dimensions (orthogonal to the others)."""
    angles = np.linspace(0.0, 0.6, 30)
    features = np.zeros((120, 8), np.float32)
    for c in range(4):
        features[30 * c:30 * (c + 1), 2 * c] = np.cos(angles)
        features[30 * c:30 * (c + 1), 2 * c + 1] = np.sin(angles)
    np.save(folder / "arcs.npy", features)
    np.save(folder / "arcs_labels.npy", np.repeat(np.arange(4), 30))
    return folder / "arcs.npy", folder / "arcs_labels.npy"


def test_separated_classes_every_method_right_so_every_difference_is_zero(tmp_path):
    # Orthogonal classes: every kernel weight across classes is exp(-40) or less (exp(0) =
    # 1 against exp(0.83 / 0.07) for LLP and the kNN, nothing for DLP), and each arc is one
    # chain of DLP's graph (k = 30 // 10 = 3) and of LP_DMT's (K = ceil(ln 120) = 5, the
    # classes its graph's components): every method labels every point right. So
    # LLP minus each method is 0 in every draw, and the 90% interval is [0, 0]: LLP is
    # comparable to LP_DMT, and not lower than DLP, so not "slightly lower" either.
    features, labels = _arcs(tmp_path)
    output = tmp_path / "arcs.json"
    result = _run(f"--features={features}", f"--labels={labels}", "--images_per_class=30",
                  "--draws=3", f"--output={output}")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert ("note: 4 classes have 30 images or more and each draw takes 4: the class draw is "
            "vacuous (every draw has the same classes; only the images are drawn).\n") in out
    assert "hyperparameters: external defaults, none chosen on these embeddings" in out
    assert out.count('LLP comparable to LP_DMT ("comparable to that of the global propagation '
                     'algorithm used in DMT"): HOLDS: LLP - LP_DMT = +0.00 points, 90% CI '
                     '[+0.00, +0.00] against (-1.0, +1.0) points; won 0 of 3') == 4
    assert out.count('LLP slightly lower than DLP ("only slightly lower than that of DLP"): '
                     'DOES NOT HOLD: LLP - DLP = +0.00 points, 90% CI [+0.00, +0.00] against '
                     '(-2.2, +0.0) points; won 0 of 3') == 4
    assert re.search(r"comparable to LP_DMT +holds +holds +holds\n", out)
    assert re.search(r"slightly lower than DLP +does not hold +does not hold +does not hold\n",
                     out)
    report = json.loads(output.read_text())
    assert report["protocol"]["class_draw_vacuous"] is True
    assert report["protocol"]["labelled_per_class_sweep"] == [5, 10, 20]
    for level, scored in (("5", 100), ("10", 80), ("20", 40)):
        entry = report["sweep"][level]
        assert list(entry["methods"]) == ["local_knn", "knn", "label_spreading",
                                          "label_propagation", "lp_dmt", "dlp"]
        for name, method in entry["methods"].items():
            assert method["accuracy_per_draw"] == [1.0, 1.0, 1.0], (level, name)
        for name, difference in entry["differences"].items():
            assert difference == {"per_draw": [0.0, 0.0, 0.0], "mean": 0.0, "std": 0.0,
                                  "ci95": [0.0, 0.0], "draws_won": 0, "draws_tied": 3,
                                  "draws_lost": 0}, (level, name)
        claims = entry["claims"]
        assert {name: claim["answer"] for name, claim in claims.items()} == {
            "comparable to LP_DMT": "holds", "slightly lower than DLP": "does not hold"}
        assert claims["comparable to LP_DMT"]["ci90"] == [0.0, 0.0]
        assert claims["comparable to LP_DMT"]["p_values"] == {"above_low": None,
                                                              "below_high": None}
        assert f"{level} labelled per class" in out and f"{scored} scored per draw" in out
    rule = report["hyperparameter_rule"]
    assert rule["rule"] == "external defaults" and rule["given_on_command_line"] == []
    values = {method: {name: entry["value"] for name, entry in settings.items()}
              for method, settings in rule["methods"].items()}
    assert values == {
        "local_knn": {"k": 10, "t": 25, "temperature": 0.07},
        "knn": {"k": 10, "temperature": 0.07},
        "label_spreading": {"alpha": 0.99, "rbf_gamma": 20.0,
                            "solver": "closed form (I - alpha S)^-1 Y"},
        "label_propagation": {"rbf_gamma": 20.0, "solver": "harmonic solution"},
        "lp_dmt": {"k": 5, "eigenvectors": 4,
                   "weights": "exp(-d / d_K), d = (1 - cos) / 2", "alpha": 0,
                   "prior": "+1 / -1, balanced by degree"},
        "dlp": {"k": 3, "gamma": 3.0, "alpha": 0.99, "max_iter": 20, "tol": 1e-6}}
    assert rule["methods"]["local_knn"]["t"]["source"] == (
        "the LLP paper's T = 25 (the authors' release: 50)")

    # Three of the four classes a draw: the class draw is no longer vacuous; a value given on
    # the command line is recorded as given.
    fewer = _run(f"--features={features}", f"--labels={labels}", "--classes=3",
                 "--images_per_class=30", "--labelled_per_class_sweep=", "--draws=2",
                 "--dlp_k=4", f"--output={output}")
    assert fewer.returncode == 0, fewer.stderr
    assert "vacuous" not in fewer.stdout and "== sweep" not in fewer.stdout
    assert "external defaults but --dlp_k (given)" in fewer.stdout
    report = json.loads(output.read_text())
    assert report["protocol"]["class_draw_vacuous"] is False
    assert report["protocol"]["labelled_per_class_sweep"] == [5]
    assert report["hyperparameter_rule"]["given_on_command_line"] == ["dlp_k"]
    assert report["hyperparameter_rule"]["methods"]["dlp"]["k"] == {
        "value": 4, "source": "given on the command line"}


@pytest.mark.parametrize("args, message", [
    (("--labelled_per_class=20", "--images_per_class=20"),
     "labelled_per_class (20) must be smaller than images_per_class (20)"),
    (("--classes=5",), "Asked for 5 classes per draw, but the labels have only 4 classes"),
    (("--images_per_class=20", "--labelled_per_class_sweep=5,20"),
     "--labelled_per_class_sweep level 20 leaves no image to score at --images_per_class=20"),
    (("--labelled_per_class_sweep=5,ten",),
     "--labelled_per_class_sweep must list whole numbers separated by commas, got 5,ten."),
    (("--labelled_per_class_sweep=0",), "--labelled_per_class_sweep levels must be at least 1"),
])
def test_impossible_protocols_are_one_line_errors(feature_files, args, message):
    features, labels = feature_files
    result = _run(f"--features={features}", f"--labels={labels}", *args)
    assert result.returncode == 1
    assert message in _error_line(result.stderr)
    assert "Traceback" not in result.stderr


def test_bad_inputs_are_one_line_errors(feature_files, tmp_path):
    features, labels = feature_files
    garbage = tmp_path / "garbage.npy"
    garbage.write_text("not an array")
    short = tmp_path / "short.npy"
    np.save(short, np.zeros(7, np.int64))
    cases = [
        ((f"--features={garbage}", f"--labels={labels}"), f"Cannot read the features file "
                                                          f"{garbage} as a numpy .npy array"),
        ((f"--features={features}", f"--labels={short}"),
         f"{short} must hold one label per feature row ([120]); it holds (7,)."),
        ((f"--features={features}",), "--features needs --labels"),
        ((f"--run_dir={tmp_path / 'missing'}",), "is not a directory"),
        ((), "Give either --run_dir"),
    ]
    for args, message in cases:
        result = _run(*args)
        assert result.returncode == 1, args
        assert message in _error_line(result.stderr), args
        assert "Traceback" not in result.stderr


def test_a_run_is_compared_from_its_bank_or_from_an_embedded_split(tiny_llp_run, tmp_path):
    bank_output, split_output = tmp_path / "bank.json", tmp_path / "split.json"
    bank = _run(f"--run_dir={tiny_llp_run}", "--images_per_class=20", "--labelled_per_class=2",
                "--draws=2", f"--output={bank_output}")
    assert bank.returncode == 0, bank.stderr
    out = bank.stdout
    assert "160 embeddings of dimension 16 (memory bank (true training labels))" in out
    assert "note: the labels have 4 classes" in out
    # The paper's K and T are the defaults, whatever the run trained with (3 and 5).
    assert ("note: the run trained with K=3 T=5 tau=0.07; the comparison uses K=10 T=25 "
            "tau=0.07 (give --k, --t, --temperature to change them).") in out
    assert "LLP (local kNN, K=10, T=25)" in out
    report = json.loads(bank_output.read_text())
    assert report["source"]["step"] == 15
    assert report["source"]["embeddings"] == "memory bank (true training labels)"
    assert not os.path.exists(os.path.join(tiny_llp_run, "propagation_comparison.json"))

    split = _run(f"--run_dir={tiny_llp_run}", "--embed_split=validation", "--classes=4",
                 "--images_per_class=8", "--labelled_per_class=2", "--draws=1",
                 "--batch_size=16", f"--output={split_output}")
    assert split.returncode == 0, split.stderr
    out = split.stdout
    # Extraction progress (llp_tf.after_training.features): every batch of the split.
    assert re.search(r"embedding of folder:\S+ validation \[#+\] 3/3 ", out), out
    assert "40 embeddings of dimension 16 (validation split embedded by the model)" in out
    report = json.loads(split_output.read_text())
    assert report["protocol"]["classes"] == 4 and report["protocol"]["feature_rows"] == 40
