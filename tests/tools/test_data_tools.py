"""tools/build_tfrecords.py and tools/make_splits.py, run in process: their
outputs and their one-line errors with exit code 1."""

import os

import numpy as np

from llp_tf.data import splits
from tests.data.helpers import write_image_folder
from tests.tools.tool_main import load_tool, run_main

BUILD = load_tool("build_tfrecords.py")
MAKE_SPLITS = load_tool("make_splits.py")


class _Result:
    def __init__(self, module, args):
        self.returncode, self.stdout, self.stderr = run_main(module, *args)


def _run_tool(name, *args):
    return _Result({"build_tfrecords.py": BUILD, "make_splits.py": MAKE_SPLITS}[name], args)


def test_build_tool_names_a_corrupt_image_and_exits_1(tmp_path):
    written = write_image_folder(str(tmp_path / "train"), {"a": 3, "b": 3})
    bad_path = written[3][0]
    with open(bad_path, "wb") as f:
        f.write(written[3][2][:30])
    result = _run_tool("build_tfrecords.py", f"--train_dir={tmp_path / 'train'}",
                       f"--output_dir={tmp_path / 'out'}")
    assert result.returncode == 1
    assert f"Cannot decode image file {bad_path}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not [n for n in os.listdir(tmp_path / "out") if not n.startswith(".")]


def test_make_splits_tool(tmp_path):
    write_image_folder(str(tmp_path / "images"), {"a": 10, "b": 10, "c": 10}, size=(6, 6))
    output = str(tmp_path / "split.npz")
    result = _run_tool("make_splits.py", f"--dataset=folder:{tmp_path / 'images'}",
                       "--label_percent=20", "--data_percent=50", f"--output={output}")
    assert result.returncode == 0, result.stderr
    labels = np.repeat([0, 1, 2], 10)
    labeled, used = splits.load_splits(output, labels)
    np.testing.assert_array_equal(labeled, [0, 1, 10, 11, 20, 21])
    np.testing.assert_array_equal(used, [0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24])

    result = _run_tool("make_splits.py", f"--dataset=folder:{tmp_path / 'images'}",
                       "--label_percent=1", f"--output={output}")
    assert result.returncode == 1
    assert "would get no labelled example" in result.stderr and "Traceback" not in result.stderr

    result = _run_tool("make_splits.py", "--dataset=imagenet", "--label_percent=1",
                       f"--output={output}")
    assert result.returncode == 1
    assert "Unknown dataset 'imagenet'" in result.stderr and "Traceback" not in result.stderr


def test_make_splits_tool_with_a_subset_list(tmp_path):
    write_image_folder(str(tmp_path / "images"), {"a": 10, "b": 10}, size=(6, 6))
    listed = tmp_path / "subset.txt"
    # Files are a/img000..img009 and b/img000..: names repeat across classes.
    listed.write_text("img002.jpg\n")
    output = str(tmp_path / "split.npz")
    result = _run_tool("make_splits.py", f"--dataset=folder:{tmp_path / 'images'}",
                       f"--label_subset={listed}", f"--output={output}")
    assert result.returncode == 1
    assert "match several training examples" in result.stderr

    for path in (tmp_path / "images" / "b").iterdir():
        path.rename(path.with_name("b_" + path.name))
    result = _run_tool("make_splits.py", f"--dataset=folder:{tmp_path / 'images'}",
                       f"--label_subset={listed}", "--data_percent=50", f"--output={output}")
    assert result.returncode == 0, result.stderr
    labeled, used = splits.load_splits(output, np.repeat([0, 1], 10))
    np.testing.assert_array_equal(labeled, [2])
    np.testing.assert_array_equal(used, [0, 1, 2, 3, 4, 10, 11, 12, 13, 14])

    result = _run_tool("make_splits.py", f"--dataset=folder:{tmp_path / 'images'}",
                       f"--label_subset={listed}", "--label_percent=10", f"--output={output}")
    assert result.returncode == 1
    assert "Give --label_percent or --label_subset (exactly one)." in result.stderr


def test_help_and_missing_required_flags():
    for module, required in ((BUILD, "--train_dir and --output_dir"),
                             (MAKE_SPLITS, "--dataset and --output")):
        code, out, _ = run_main(module, "--help")
        assert code == 0 and "Flags:" in out and "required" in out
        code, _, err = run_main(module)
        assert code == 1 and err == f"error: give {required} (see --help).\n"
