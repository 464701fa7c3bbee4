import csv
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.after_training.export import saved_model
from llp_tf.data.augmentation import eval_transform
from tests.cli.tool_main import load_tool, run_main, tool_path

PREDICT = tool_path("predict.py")
FRESH_PROCESS_TIMEOUT_SECONDS = 120
# The modules of llp_tf that predict imports.
LIGHT_MODULES = sorted(["llp_tf", "llp_tf.lazy_attributes", "llp_tf.after_training",
                        "llp_tf.after_training.predict", "llp_tf.cli", "llp_tf.cli.command_line",
                        "llp_tf.cli.predict", "llp_tf.cli.quiet_start", "llp_tf.keras_registration",
                        "llp_tf.tensor_types", "llp_tf.tool_names"])
# Probabilities are printed with four decimals.
PRINTED_TOLERANCE = 5e-5 + 1e-6


predict_tool = load_tool("predict.py")


def _run(*args):
    return run_main(predict_tool, *args)


@pytest.fixture(scope="module")
def model_dir(tiny_llp_export):
    """The shared export of the tiny run (`tiny_llp_export`); do not write into it."""
    return tiny_llp_export[0]


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
    batch = eval_transform.eval_preprocess(image, run.config.data.image_size)[tf.newaxis]
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


@pytest.fixture(scope="module")
def image_tree(image_files, tmp_path_factory):
    """A folder of images (nested, one with an upper-case extension) and a text
    file: (folder, the images in the sorted order the tool reads them)."""
    root = tmp_path_factory.mktemp("tree") / "imgs"
    (root / "b").mkdir(parents=True)
    (root / "sub").mkdir()
    copies = {root / "a.png": image_files[0], root / "b" / "x.png": image_files[1],
              root / "sub" / "c.JPG": image_files[-1], root / "sub" / "d.png": image_files[3]}
    for copy, original in copies.items():
        shutil.copyfile(original, copy)
    (root / "notes.txt").write_text("not an image")
    return str(root), [str(path) for path in sorted(copies)]


def _expected_top(run, class_names, path, top):
    """[(rank, class, name, probability)] the tool should give for ``path``."""
    expected = _expected_probabilities(run, path)
    order = np.argsort(-expected, kind="stable")[:top]
    return [(rank, int(c), class_names[c], expected[c]) for rank, c in enumerate(order, 1)]


def _check_rows(rows, expected):
    """rows: [(rank, class, name, probability)] as the tool printed them."""
    assert [row[:3] for row in rows] == [row[:3] for row in expected]
    np.testing.assert_allclose([row[3] for row in rows], [row[3] for row in expected],
                               atol=1e-5)


def test_directories_are_read_recursively_in_sorted_order(model_dir, image_tree):
    folder, images = image_tree
    code, stdout, stderr = _run(f"--model_dir={model_dir}", "--top=1", folder)
    assert (code, stderr) == (0, "")
    assert list(_parse(stdout)) == images


def test_quoted_globs_are_expanded_and_each_image_is_read_once(model_dir, image_tree):
    folder, images = image_tree
    pngs = [path for path in images if path.endswith(".png")]
    code, stdout, stderr = _run(f"--model_dir={model_dir}", "--top=1",
                                os.path.join(folder, "**", "*.png"), images[0])
    assert (code, stderr) == (0, "")
    assert list(_parse(stdout)) == pngs
    # A directory that a pattern matches gives its images.
    code, stdout, _ = _run(f"--model_dir={model_dir}", "--top=1", os.path.join(folder, "s*"))
    assert code == 0 and list(_parse(stdout)) == [p for p in images if "/sub/" in p]


def test_json_lines_hold_each_images_top_classes(run, class_names, model_dir, image_tree):
    folder, images = image_tree
    code, stdout, stderr = _run(f"--model_dir={model_dir}", "--format=json", "--top=3", folder)
    assert (code, stderr) == (0, "")
    records = [json.loads(line) for line in stdout.splitlines()]
    assert [record["path"] for record in records] == images
    for record in records:
        assert all(type(item["class"]) is int for item in record["top"])
        _check_rows([(i["rank"], i["class"], i["name"], i["probability"]) for i in record["top"]],
                    _expected_top(run, class_names, record["path"], 3))


def test_csv_has_a_header_and_a_row_per_image_and_rank(run, class_names, model_dir, image_tree):
    folder, images = image_tree
    code, stdout, stderr = _run(f"--model_dir={model_dir}", "--format=csv", "--top=2", folder)
    assert (code, stderr) == (0, "")
    rows = list(csv.DictReader(io.StringIO(stdout)))
    assert stdout.splitlines()[0] == "path,rank,class,name,probability"
    assert [row["path"] for row in rows] == [path for path in images for _ in range(2)]
    for path in images:
        _check_rows([(int(r["rank"]), int(r["class"]), r["name"], float(r["probability"]))
                     for r in rows if r["path"] == path],
                    _expected_top(run, class_names, path, 2))


def test_runs_in_a_fresh_process_with_only_its_own_part_of_llp_tf(run, model_dir, image_tree,
                                                                 class_names, tmp_path):
    # The tool as a script, given a directory, a quoted pattern and a broken
    # file, then a check that it imported of llp_tf only the modules it runs (no
    # training, data or model code). runpy does not put the script's folder first on
    # sys.path as `python tools/predict.py` does.
    folder, images = image_tree
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 30)  # a PNG signature, then nothing
    argv = [PREDICT, f"--model_dir={model_dir}", "--format=json", os.path.join(folder, "sub"),
            str(broken), os.path.join(folder, "*.png")]
    script = ("import os, runpy, sys\n"
              f"sys.path.insert(0, os.path.dirname({PREDICT!r}))\n"
              f"sys.argv = {argv!r}\n"
              "try:\n"
              f"    runpy.run_path({PREDICT!r}, run_name='__main__')\n"
              "except SystemExit as done:\n"
              "    code = done.code\n"
              "used = sorted(m for m in sys.modules if m.startswith('llp_tf'))\n"
              f"assert used == {LIGHT_MODULES!r}, used\n"
              "sys.exit(code)\n")
    # TensorFlow's C++ logging as a user has it (the tests turn it off).
    env = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=FRESH_PROCESS_TIMEOUT_SECONDS, cwd=os.path.dirname(model_dir),
                            env=env)
    # The broken file's line alone on stderr, no TensorFlow runtime line before it.
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {broken}: cannot be read as a PNG, JPEG, GIF or "
                                    "BMP image (")
    assert result.stderr.count("\n") == 1, result.stderr[-3000:]
    records = [json.loads(line) for line in result.stdout.splitlines()]
    sub = [path for path in images if "/sub/" in path]
    assert [record["path"] for record in records] == sub + [images[0]]
    # --top defaults to 5, capped at the 4 classes.
    assert [item["name"] for item in records[0]["top"]] == [
        name for _, _, name, _ in _expected_top(run, class_names, sub[0], 5)]


def test_bad_files_get_a_line_each_and_the_others_are_still_classified(model_dir, image_files,
                                                                       image_tree, tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_text("not an image")
    missing = str(tmp_path / "missing.jpg")
    empty = tmp_path / "empty"
    empty.mkdir()
    pattern = str(tmp_path / "*.gif")
    code, stdout, stderr = _run(f"--model_dir={model_dir}", "--top=1", image_files[0],
                                str(broken), missing, str(empty), pattern, image_files[1])
    assert code == 1
    assert list(_parse(stdout)) == [image_files[0], image_files[1]]
    lines = stderr.splitlines()
    assert lines[:2] == [f"error: {empty}: the directory holds no PNG, JPEG, GIF or BMP file",
                         f"error: {pattern}: the pattern holds no PNG, JPEG, GIF or BMP file"]
    # The reason in parentheses is TensorFlow's, without its op decorations.
    assert lines[2].startswith(f"error: {broken}: cannot be read as a PNG, JPEG, GIF or BMP "
                               "image (Unknown image file format")
    assert "{{" not in lines[2] and "[Op:" not in lines[2]
    assert lines[3:] == [f"error: {missing}: no such image file"]


def test_bad_model_dir_and_no_images_are_clear_errors(image_files, tmp_path):
    assert _run(f"--model_dir={tmp_path}", image_files[0]) == (1, "", (
        f"error: {tmp_path} is not a SavedModel (it has no saved_model.pb); give the "
        "--output_dir of llp-export.\n"))
    assert _run(f"--model_dir={tmp_path / 'none'}", image_files[0]) == (
        1, "", f"error: the model directory {tmp_path / 'none'} does not exist.\n")
    assert _run(f"--model_dir={tmp_path}") == (
        1, "", "error: give images (files, directories or patterns), as arguments or with "
        "--images.\n")
    code, _, stderr = _run(f"--model_dir={tmp_path}", "--top=0", image_files[0])
    assert code == 1 and "--top" in stderr and "Traceback" not in stderr
    code, _, stderr = _run(f"--model_dir={tmp_path}", "--format=xml", image_files[0])
    assert code == 1 and "--format" in stderr and "Traceback" not in stderr


def test_help_documents_every_flag():
    code, stdout, _ = _run("--help")
    assert code == 0 and "Classify images with a SavedModel" in stdout
    assert "found recursively" in stdout and "JSON Lines" in stdout
    for flag in ("--model_dir:", "--images:", "--top:", "--batch_size:", "--format:"):
        assert flag in stdout, flag


def test_an_export_of_imagenet_classes_prints_their_names(run, image_files, tmp_path):
    # The dataset names its classes by WordNet id, as TFDS's imagenet2012 does.
    wordnet_ids = ["n01440764", "n01443537", "n01530575", "n01531178"]
    path = str(tmp_path / "model")
    info = saved_model.export_run(run, wordnet_ids, path)
    names = ["tench", "goldfish", "brambling", "goldfinch"]
    assert info["class_names"] == names
    code, stdout, stderr = _run(f"--model_dir={path}", "--top=4", image_files[0])
    assert code == 0, stderr
    printed = _parse(stdout)[image_files[0]]
    expected = _expected_probabilities(run, image_files[0])
    assert [name for name, _ in printed] == [names[c] for c in np.argsort(-expected)]
