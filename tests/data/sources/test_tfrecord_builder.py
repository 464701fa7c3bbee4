"""tools/build_tfrecords.py and its library: the release's numbering, re-encoding,
and the tools' (build_tfrecords, make_splits; run in process) one-paragraph
errors with exit code 1."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.sources.registry import load_source
from llp_tf.data.sources.tfrecord_builder import build_tfrecords
from llp_tf.data.splits import regime
from llp_tf.errors import DataError
from tests.data.helpers import decoded, write_image_folder
from tests.cli.tool_main import load_tool, run_main

BUILD = load_tool("build_tfrecords.py")
MAKE_SPLITS = load_tool("make_splits.py")


def test_build_numbers_images_in_the_seeded_permutation(tmp_path):
    train = write_image_folder(str(tmp_path / "images" / "train"), {"b": 4, "a": 5, "c": 3},
                               grayscale_every=3)
    validation = write_image_folder(str(tmp_path / "images" / "val"), {"a": 2, "c": 2}, seed=2)
    out = str(tmp_path / "records")
    summary = build_tfrecords(str(tmp_path / "images" / "train"), out,
                              validation_dir=str(tmp_path / "images" / "val"),
                              train_shards=5, validation_shards=3, log=lambda line: None)
    assert (summary["num_train"], summary["num_validation"]) == (12, 4)
    assert sorted(os.listdir(out)) == ["dataset_info.json"] + [
        f"train-{s:05d}-of-00005" for s in range(5)] + [
        f"validation-{s:05d}-of-00003" for s in range(3)]
    with open(os.path.join(out, "dataset_info.json")) as f:
        assert json.load(f)["class_names"] == ["a", "b", "c"]

    names = ["a", "b", "c"]
    permutation = np.random.RandomState(0).permutation(len(train))
    source = load_source(f"tfrecord:{out}")
    np.testing.assert_array_equal(source.train_labels(),
                                  [names.index(train[p][1]) for p in permutation])
    np.testing.assert_array_equal(source.validation_labels(),
                                  [names.index(c) for _, c, _ in validation])

    # Records are written in index order; PNGs are stored as JPEG.
    stored = [tf.train.Example.FromString(r.numpy())
              for r in tf.data.TFRecordDataset(sorted(
                  os.path.join(out, n) for n in os.listdir(out) if n.startswith("train-")))]
    assert [e.features.feature["index"].int64_list.value[0] for e in stored] == list(range(12))
    for example, p in zip(stored, permutation):
        content = example.features.feature["images"].bytes_list.value[0]
        assert content.startswith(b"\xff\xd8\xff")
        original = decoded(train[p][2])
        if train[p][2].startswith(b"\xff\xd8"):
            assert content == train[p][2]
        else:
            error = np.abs(decoded(content).astype(int) - original.astype(int)).mean()
            assert error < 12  # JPEG loss on tiny images; another image differs by ~60
    with data_errors():
        assert len(list(source.raw_dataset("train"))) == 12


def test_build_refuses_to_mix_with_existing_shards_or_replace_an_info_file(tmp_path):
    write_image_folder(str(tmp_path / "train"), {"a": 2})
    build_tfrecords(str(tmp_path / "train"), str(tmp_path / "out"), log=lambda line: None)
    with pytest.raises(DataError, match="already holds shards"):
        build_tfrecords(str(tmp_path / "train"), str(tmp_path / "out"), log=lambda line: None)
    other = tmp_path / "tfds_folder"  # e.g. TFDS's, whose shards have other names
    other.mkdir()
    (other / "dataset_info.json").write_text('{"name": "mnist"}')
    with pytest.raises(DataError, match=f"already holds shards or dataset_info.json "
                                        f"\\({other}/dataset_info.json, ...\\)"):
        build_tfrecords(str(tmp_path / "train"), str(other), log=lambda line: None)
    assert os.listdir(other) == ["dataset_info.json"]
    assert (other / "dataset_info.json").read_text() == '{"name": "mnist"}'


class _Result:
    """(returncode, stdout, stderr) of a tool's ``main`` run in this process."""

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
    labelled, used = regime.load_splits(output, labels)
    np.testing.assert_array_equal(labelled, [0, 1, 10, 11, 20, 21])
    np.testing.assert_array_equal(used, [0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24])

    excluded = tmp_path / "bad.txt"
    excluded.write_text("train 0\ntrain 12\n")
    result = _run_tool("make_splits.py", f"--dataset=folder:{tmp_path / 'images'}",
                       "--label_percent=20", "--data_percent=50", f"--output={output}",
                       f"--exclude_list={excluded}")
    assert result.returncode == 0, result.stderr
    labelled, used = regime.load_splits(output, labels)
    np.testing.assert_array_equal(labelled, [1, 2, 10, 11, 20, 21])
    np.testing.assert_array_equal(used, [1, 2, 3, 4, 5, 10, 11, 13, 14, 15, 20, 21, 22, 23, 24])
    assert regime.read_made_from(output)["exclude_list"]["path"] == str(excluded)
    assert regime.read_split_exclusions(output)["train"].tolist() == [0, 12]

    result = _run_tool("make_splits.py", f"--dataset=folder:{tmp_path / 'images'}",
                       "--label_percent=1", f"--output={output}")
    assert result.returncode == 1
    assert "would get no labelled example" in result.stderr and "Traceback" not in result.stderr

    result = _run_tool("make_splits.py", "--dataset=imagenet", "--label_percent=1",
                       f"--output={output}")
    assert result.returncode == 1
    assert "Unknown dataset 'imagenet'" in result.stderr and "Traceback" not in result.stderr


def test_make_splits_tool_replaces_neither_a_runs_split_nor_another_file(tmp_path):
    write_image_folder(str(tmp_path / "images"), {"a": 10, "b": 10}, size=(6, 6))
    run_dir = tmp_path / "run"  # a split file, but the run's
    run_dir.mkdir()
    (run_dir / "config.json").write_text(
        '{"run": {"run_dir": "run"}, "data": {"dataset": "digits"}}')
    args = (f"--dataset=folder:{tmp_path / 'images'}", "--label_percent=20")
    assert _run_tool("make_splits.py", *args, f"--output={run_dir / 'split.npz'}").returncode == 0
    other = tmp_path / "features.npz"
    other.write_bytes(b"not a split")
    for output, message in (
            (run_dir / "split.npz", f"is the split of the training run in {run_dir}"),
            (other, "exists and is not a split file")):
        before = output.read_bytes()
        result = _run_tool("make_splits.py", *args, "--split_seed=1", f"--output={output}")
        assert result.returncode == 1
        assert result.stderr == (f"make_splits: {output} {message}, so it is not replaced: "
                                 "give another --output.\n")
        assert "Traceback" not in result.stderr and output.read_bytes() == before
    assert sorted(os.listdir(run_dir)) == ["config.json", "split.npz"]


def test_make_splits_tool_names_its_seed_as_train_does(tmp_path):
    write_image_folder(str(tmp_path / "images"), {"a": 10, "b": 10, "c": 10}, size=(6, 6))
    labels = np.repeat([0, 1, 2], 10)
    expected = regime.make_splits(labels, 20, 50, seed=3, num_classes=3)
    # A seeded draw, not the lowest indices.
    assert expected[0].tolist() != [0, 1, 10, 11, 20, 21]
    output = str(tmp_path / "split.npz")
    result = _run_tool("make_splits.py", f"--dataset=folder:{tmp_path / 'images'}",
                       "--label_percent=20", "--data_percent=50", "--split_seed=3",
                       f"--output={output}")
    assert (result.returncode, result.stderr) == (0, "")
    for got, want in zip(regime.load_splits(output, labels), expected):
        np.testing.assert_array_equal(got, want)


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
    labelled, used = regime.load_splits(output, np.repeat([0, 1], 10))
    np.testing.assert_array_equal(labelled, [2])
    np.testing.assert_array_equal(used, [0, 1, 2, 3, 4, 10, 11, 12, 13, 14])
    assert regime.read_made_from(output)["label_subset"]["path"] == str(listed)
    assert regime.read_split_header(output)["label_percent"] is None

    result = _run_tool("make_splits.py", f"--dataset=folder:{tmp_path / 'images'}",
                       f"--label_subset={listed}", "--label_percent=10", f"--output={output}")
    assert result.returncode == 1
    assert "Give --label_percent or --label_subset (exactly one)." in result.stderr


def test_tools_answer_help_and_name_missing_required_flags():
    for module, prefix, required in ((BUILD, "build_tfrecords: ", ("output_dir",)),
                                     (MAKE_SPLITS, "make_splits: ", ("dataset", "output"))):
        code, out, _ = run_main(module, "--help")
        assert code == 0 and "Flags:" in out and "--verbosity" in out
        code, _, err = run_main(module)
        assert code == 1 and err.startswith("error: ")
        for name in required:
            assert f"Flag --{name} must have a value other than None." in err
    result = _run_tool("make_splits.py", "--dataset=imagenet", "--label_percent=1",
                       "--output=unused.npz")
    assert result.stderr.startswith("make_splits: Unknown dataset 'imagenet'")
