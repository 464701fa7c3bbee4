import json
import os
import re
import types
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from llp_tf.after_training.transduction import methods, protocol
from tests.cli.tool_main import load_tool, run_main

METHOD_TITLES = ("LLP (local kNN, K=10, T=25)", "weighted kNN (K=10)",
                 "label spreading (sklearn)", "label propagation (sklearn)",
                 "DLP diffusion (k=50)")


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
    assert "draw 2/2:" in out
    table = out[out.index("method"):]
    for title in METHOD_TITLES:
        assert title in table
    assert "0.881 (LLP)" in table and "0.846 (LS)" in table and "0.877 (LP)" in table
    assert "0.892 (LP_DLP)" in table

    written = features.parent / "feats_propagation_comparison.json"
    assert f"wrote {written}" in out
    assert [p.name for p in features.parent.iterdir() if p.name.startswith(".")] == []
    report = json.loads(written.read_text())
    assert report["protocol"] == {"classes": 4, "images_per_class": 20, "labelled_per_class": 3,
                                  "draws": 2, "seed": 3, "feature_rows": 120, "feature_dim": 16}
    # The same protocol run here gives the same accuracies. (Label propagation
    # stops at its step cap on these overlapping classes; the tool notes it.)
    assert "note: a method warned: max_iter=1000 was reached without convergence." in out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        expected = protocol.compare_methods(np.load(features), np.load(labels),
                                            methods.standard_methods(), 4, 20, 3, 2, seed=3)
    for method in expected.methods:
        entry = report["methods"][method.name]
        # Fractions, as every accuracy.
        np.testing.assert_allclose(entry["accuracy_per_draw"], expected.accuracy[method.name])
        assert entry["accuracy_mean"] == pytest.approx(expected.mean(method.name))
        assert entry["accuracy_std"] == pytest.approx(expected.std(method.name))
        assert f"{expected.mean(method.name):.4f}" in table
    assert report["methods"]["local_knn"]["paper_table5"] == {"name": "LLP", "accuracy": 0.881}
    assert report["methods"]["knn"]["paper_table5"] is None


@pytest.mark.parametrize("args, message", [
    (("--labelled_per_class=20", "--images_per_class=20"),
     "labelled_per_class (20) must be smaller than images_per_class (20)"),
    (("--classes=5",), "Asked for 5 classes per draw, but the labels have only 4 classes"),
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
    # The run's own K and T (3 and 5) are the defaults.
    assert "K=3 T=5 tau=0.07" in out and "LLP (local kNN, K=3, T=5)" in out
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
