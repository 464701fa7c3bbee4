import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.after_training.export import saved_model
from llp_tf.data import augment
from tests.tools.tool_main import load_tool, run_main, tool_path

PREDICT = tool_path("predict.py")
FRESH_PROCESS_TIMEOUT_SECONDS = 120
# Probabilities are printed with four decimals.
PRINTED_TOLERANCE = 5e-5 + 1e-6


predict_tool = load_tool("predict.py")


def _run(*args):
    return run_main(predict_tool, *args)


@pytest.fixture(scope="module")
def model_dir(run, class_names, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("predict") / "model")
    saved_model.export_run(run, class_names, path)
    return path


@pytest.fixture(scope="module")
def image_files(run, tmp_path_factory):
    """One validation PNG per class (16 px RGB) and a 40 x 30 grayscale JPEG."""
    root = os.path.join(run.config.data.dataset.split(":", 1)[1], "validation")
    paths = [os.path.join(root, kind, sorted(os.listdir(os.path.join(root, kind)))[0])
             for kind in sorted(os.listdir(root))]
    image = tf.io.decode_png(tf.io.read_file(paths[2]), channels=1)
    resized = tf.cast(tf.round(tf.image.resize(image, [40, 30])), tf.uint8)
    jpeg = str(tmp_path_factory.mktemp("images") / "gray.jpg")
    tf.io.write_file(jpeg, tf.io.encode_jpeg(resized))
    return paths + [jpeg]


def _expected_probabilities(run, path):
    """float64 [C]: the trained model's softmax on one file, decoded as the tool does."""
    image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    batch = augment.eval_preprocess(image, run.config.data.image_size)[tf.newaxis]
    logits = run.model(batch, training=False)["logits"].numpy()[0].astype(np.float64)
    exponentials = np.exp(logits - logits.max())
    return exponentials / exponentials.sum()


def _parse(stdout):
    """{path: [(name, probability), ...]} from the tool's output."""
    blocks, current = {}, None
    for line in stdout.splitlines():
        if line.startswith("  "):
            rank, name, probability = line.split()
            assert rank == f"{len(blocks[current]) + 1}."
            blocks[current].append((name, float(probability)))
        else:
            current = line
            blocks[current] = []
    return blocks


def test_prints_the_top_classes_of_each_image(run, class_names, model_dir, image_files):
    code, stdout, stderr = _run(f"--model_dir={model_dir}", "--top=2",
                                f"--images={','.join(image_files[:2])}", *image_files[2:])
    assert code == 0, stderr
    printed = _parse(stdout)
    assert list(printed) == image_files
    for path in image_files:
        expected = _expected_probabilities(run, path)
        order = np.argsort(-expected)[:2]
        assert [name for name, _ in printed[path]] == [class_names[c] for c in order], path
        np.testing.assert_allclose([p for _, p in printed[path]], expected[order],
                                   atol=PRINTED_TOLERANCE)


def test_runs_in_a_fresh_process_without_llp_tf(run, model_dir, image_files, class_names):
    # The tool as a script, then a check that nothing imported llp_tf.
    # runpy does not put the script's folder first on sys.path as `python tools/predict.py` does.
    script = ("import os, runpy, sys\n"
              f"sys.path.insert(0, os.path.dirname({PREDICT!r}))\n"
              f"sys.argv = [{PREDICT!r}, '--model_dir=' + {model_dir!r}, {image_files[0]!r}]\n"
              "try:\n"
              f"    runpy.run_path({PREDICT!r}, run_name='__main__')\n"
              "except SystemExit as done:\n"
              "    code = done.code\n"
              "assert 'llp_tf' not in sys.modules, 'predict.py imported llp_tf'\n"
              "sys.exit(code)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=FRESH_PROCESS_TIMEOUT_SECONDS, cwd=os.path.dirname(model_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    printed = _parse(result.stdout)
    # --top defaults to 5, capped at the 4 classes.
    expected = _expected_probabilities(run, image_files[0])
    assert [name for name, _ in printed[image_files[0]]] == [
        class_names[c] for c in np.argsort(-expected)]


def test_missing_and_unreadable_images_are_named(model_dir, image_files, tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_text("not an image")
    missing = str(tmp_path / "missing.jpg")
    code, stdout, stderr = _run(f"--model_dir={model_dir}", image_files[0], str(broken),
                                missing)
    assert code == 1 and stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 2
    # The reason in parentheses is TensorFlow's, without its op decorations.
    assert lines[0].startswith(f"error: {broken}: cannot be read as a PNG, JPEG, GIF or BMP "
                               "image (Unknown image file format")
    assert "{{" not in lines[0] and "[Op:" not in lines[0]
    assert lines[1] == f"error: {missing}: no such image file"


def test_bad_model_dir_and_no_images_are_clear_errors(image_files, tmp_path):
    assert _run(f"--model_dir={tmp_path}", image_files[0]) == (1, "", (
        f"error: {tmp_path} is not a SavedModel (it has no saved_model.pb); give the "
        "--output_dir of tools/export.py.\n"))
    assert _run(f"--model_dir={tmp_path / 'none'}", image_files[0]) == (
        1, "", f"error: the model directory {tmp_path / 'none'} does not exist.\n")
    assert _run(f"--model_dir={tmp_path}") == (
        1, "", "error: give image files, as arguments or with --images.\n")
    code, _, stderr = _run(f"--model_dir={tmp_path}", "--top=0", image_files[0])
    assert code == 1 and "--top" in stderr and "Traceback" not in stderr


def test_help_documents_every_flag():
    code, stdout, _ = _run("--help")
    assert code == 0 and "Classify image files with a SavedModel" in stdout
    for flag in ("--model_dir:", "--images:", "--top:", "--batch_size:"):
        assert flag in stdout, flag
