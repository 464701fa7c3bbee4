import json
import os
import shutil
import sys

import numpy as np
import onnxruntime
import pytest

from llp_tf.after_training import run_loader
from llp_tf.after_training.export import export_summary
from tests.runs import file_contents
from tests.cli.tool_main import load_tool, run_main



export_tool = load_tool("export.py")


def _run(*args):
    return run_main(export_tool, *args)


def _info(model_dir):
    with open(os.path.join(model_dir, "export_info.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def knn_export(tiny_llp_run, tmp_path_factory):
    """(output dir, exit code, stdout, stderr) of one export with --knn, --onnx and --keras."""
    output_dir = str(tmp_path_factory.mktemp("export_tool") / "model")
    return (output_dir,) + _run(f"--run_dir={tiny_llp_run}", f"--output_dir={output_dir}",
                                "--knn", "--onnx", "--keras")


def test_export_writes_the_saved_model_and_prints_its_signatures(knn_export):
    output_dir, code, stdout, stderr = knn_export
    assert code == 0, stderr
    assert os.path.isfile(os.path.join(output_dir, "saved_model.pb"))
    info = _info(output_dir)
    assert info["source"]["step"] == 15 and set(info["signatures"]) == {
        "embed", "classify", "knn"}
    assert "ckpt-15 (step 15), llp resnet10, 4 classes" in stdout
    assert f"Wrote {output_dir} (" in stdout
    for line in ("  embed(images uint8 [B, H, W, C]) ->",
                 "  classify(images uint8 [B, H, W, C]) (also serving_default) ->",
                 "  knn(images uint8 [B, H, W, C]) ->",
                 "    embedding: float32 [B, 16]",
                 "    top5_classes: int64 [B, 4]  best first",
                 "    top5_names: string [B, 4]",
                 "    neighbor_rows: int64 [B, 3]",
                 "    knn_class: int64 [B]"):
        assert line in stdout, line


def test_an_existing_export_needs_overwrite(tiny_llp_run, knn_export):
    output_dir = knn_export[0]
    saved = os.path.join(output_dir, "saved_model.pb")
    before = os.stat(saved).st_mtime_ns
    code, stdout, stderr = _run(f"--run_dir={tiny_llp_run}", f"--output_dir={output_dir}")
    assert code == 1 and stdout == ""
    assert stderr == (f"error: {output_dir} already exists; pass --overwrite to replace it, "
                      "or choose another --output_dir.\n")
    assert os.stat(saved).st_mtime_ns == before


def test_overwrite_replaces_an_export_with_an_older_checkpoint(tiny_llp_run, knn_export,
                                                               tmp_path):
    output_dir = tmp_path / "model"
    shutil.copytree(knn_export[0], output_dir)  # an earlier export, with knn and model.onnx
    oldest = run_loader.checkpoint_step(run_loader.checkpoint_paths(tiny_llp_run)[0])
    code, stdout, stderr = _run(f"--run_dir={tiny_llp_run}", f"--output_dir={output_dir}",
                                f"--checkpoint={oldest}", "--overwrite")
    assert code == 0, stderr
    info = _info(str(output_dir))
    assert info["source"]["step"] == oldest < 15
    assert set(info["signatures"]) == {"embed", "classify"} and "knn" not in info
    assert "knn(" not in stdout
    assert "onnx" not in info and not (output_dir / "model.onnx").exists()
    assert "ONNX" not in stdout
    assert os.listdir(tmp_path) == ["model"]  # no temporary or replaced directory left


@pytest.mark.parametrize("inside", ["run", "other"])
def test_overwrite_refuses_a_training_run_or_another_folder_and_keeps_every_file(
        tiny_llp_run, tmp_path, inside):
    folder = tmp_path / "folder"
    if inside == "run":
        shutil.copytree(tiny_llp_run, folder)
        held = ("holds a training run (config.json, split.npz, checkpoints, metrics.jsonl and "
                "1 more)")
    else:
        folder.mkdir()
        (folder / "saved_model.pb").write_text("not ours")
        (folder / "notes.txt").write_text("mine")
        held = "is not an earlier export (it holds notes.txt, saved_model.pb)"
    before = file_contents(folder)
    code, stdout, stderr = _run(f"--run_dir={folder if inside == 'run' else tiny_llp_run}",
                                f"--output_dir={folder}", "--overwrite")
    assert code == 1 and stdout == ""
    assert stderr == (f"error: {folder} {held}, so --overwrite does not replace it: choose "
                      "another --output_dir.\n")
    assert "Traceback" not in stderr
    assert file_contents(folder) == before and os.listdir(tmp_path) == ["folder"]


def test_onnx_writes_a_model_onnx_runtime_runs(knn_export):
    output_dir, code, stdout, stderr = knn_export
    assert code == 0, stderr
    path = os.path.join(output_dir, "model.onnx")
    assert _info(output_dir)["onnx"]["file"] == "model.onnx"
    assert ("Tracing the signatures and writing the SavedModel and model.onnx and "
            "model.keras ...\n" in stdout)
    assert (f"ONNX model {path} (opset 17): images float32 [B, 16, 16, 3] preprocessed "
            f"({export_summary.PREPROCESSING}) -> probabilities float32 [B, 4], embedding "
            "float32 [B, 16]\n" in stdout)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    outputs = dict(zip(["probabilities", "embedding"], session.run(
        ["probabilities", "embedding"], {"images": np.zeros((2, 16, 16, 3), np.float32)})))
    assert outputs["probabilities"].shape == (2, 4) and outputs["embedding"].shape == (2, 16)


def test_keras_writes_a_model_keras_and_says_how_to_load_it(knn_export):
    import keras
    output_dir, code, stdout, stderr = knn_export
    assert code == 0, stderr
    path = os.path.join(output_dir, "model.keras")
    assert _info(output_dir)["keras"]["file"] == "model.keras"
    assert (f"Keras model {path}: images float32 [B, 16, 16, 3] preprocessed "
            f"({export_summary.PREPROCESSING}) -> features [B, 64], embedding [B, 16], "
            "logits [B, 4]; load with: import llp_tf; keras.saving.load_model(path)\n"
            in stdout)
    outputs = keras.saving.load_model(path)(np.zeros((2, 16, 16, 3), np.float32))
    assert outputs["logits"].shape == (2, 4) and outputs["embedding"].shape == (2, 16)


def test_onnx_without_tf2onnx_is_a_clear_error(tiny_llp_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tf2onnx", None)
    code, stdout, stderr = _run(f"--run_dir={tiny_llp_run}", f"--output_dir={tmp_path / 'm'}",
                                "--onnx")
    assert code == 1 and stdout == ""
    assert stderr.startswith("error: Exporting to ONNX needs the packages tf2onnx and onnx (")
    assert stderr.endswith("or export without --onnx.\n") and stderr.count("\n") == 1
    assert os.listdir(tmp_path) == []


def test_a_failed_conversion_keeps_the_previous_export(tiny_llp_run, knn_export, tmp_path,
                                                      monkeypatch):
    import tf2onnx

    def fail(*args, **kwargs):
        raise ValueError("unsupported op Foo")

    monkeypatch.setattr(tf2onnx.convert, "from_function", fail)
    output_dir = tmp_path / "model"
    shutil.copytree(knn_export[0], output_dir)
    before = file_contents(output_dir)
    code, _, stderr = _run(f"--run_dir={tiny_llp_run}", f"--output_dir={output_dir}", "--onnx",
                           "--overwrite")
    assert code == 1
    assert stderr == (f"error: tf2onnx {tf2onnx.__version__} could not convert the network to "
                      "ONNX opset 17 (ValueError: unsupported op Foo); export without --onnx.\n")
    assert os.listdir(tmp_path) == ["model"] and file_contents(output_dir) == before


@pytest.mark.parametrize("args, message", [
    ((), "error: give --run_dir, the directory of a training run.\n"),
    (("--run_dir=/no/such/run",), "error: --run_dir=/no/such/run (command line) does not "
     "exist; give the directory of a training run.\n"),
])
def test_missing_run_dir_is_a_clear_error(args, message):
    assert _run(*args) == (1, "", message)


def test_a_run_dir_that_is_a_file_is_a_clear_error(tmp_path):
    (tmp_path / "run").write_text("")
    (tmp_path / "mine.flags").write_text(f"--run_dir={tmp_path / 'run'}\n")
    assert _run(f"--flagfile={tmp_path / 'mine.flags'}") == (
        1, "", f"error: --run_dir={tmp_path / 'run'} (from {tmp_path / 'mine.flags'}) is a file; "
        "give the directory of a training run.\n")


def test_bad_checkpoint_and_non_run_directory_are_clear_errors(tiny_llp_run, tmp_path):
    code, _, stderr = _run(f"--run_dir={tiny_llp_run}", f"--output_dir={tmp_path / 'a'}",
                           "--checkpoint=999")
    steps = sorted(run_loader.checkpoint_step(p)
                   for p in run_loader.checkpoint_paths(tiny_llp_run))
    assert code == 1 and stderr == (
        f"error: The run {tiny_llp_run} has no checkpoint at step 999; its kept checkpoints "
        f"are at steps: {', '.join(map(str, steps))}.\n")
    code, _, stderr = _run(f"--run_dir={tmp_path}", f"--output_dir={tmp_path / 'b'}")
    assert code == 1 and "is not a training run directory" in stderr
    assert "Traceback" not in stderr
    assert not os.path.exists(tmp_path / "a") and not os.path.exists(tmp_path / "b")


def test_help_documents_every_flag():
    code, stdout, _ = _run("--help")
    assert code == 0 and "Export a trained run as a TensorFlow SavedModel" in stdout
    for flag in ("--run_dir:", "--checkpoint:", "--output_dir:", "--[no]knn:", "--[no]onnx:",
                 "--[no]overwrite:"):
        assert flag in stdout, flag
