"""List-file sources (list:) and the Places205 shortcut (places205:): parsing,
labels, stable indices, decoded pixels, class names, bad input, and the
sources feeding build_tfrecords and the training pipeline."""

import os

import numpy as np
import pytest

from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.pipeline import input_fns
from llp_tf.data.sources.list_files import ListSource, derive_class_names, parse_list_file
from llp_tf.data.sources.registry import load_source
from llp_tf.data.sources.tfrecord_builder import build_tfrecords_from_source
from llp_tf.errors import DataError
from tests.data.helpers import all_labelled, decoded
from tests.data.sources.places205_fake import DEEP, write_images as _write_images
from tests.data.sources.places205_fake import write_places as _write_places
from tests.cli.tool_main import load_tool, run_main

BUILD = load_tool("build_tfrecords.py")
TRAIN = load_tool("train.py")
def _raw(source, split):
    with data_errors():
        return list(source.raw_dataset(split).as_numpy_iterator())


def _list_name(root, train, validation=None, **extra):
    query = f"train={train}" + (f"&validation={validation}" if validation else "")
    query += "".join(f"&{key}={value}" for key, value in extra.items())
    return f"list:{root}?{query}"


@pytest.fixture
def flat(tmp_path):
    """A flat image root (like ImageNet's validation folder) and its files."""
    names = ["cat/b.jpg", "dog/a.png", "cat/a.jpg", "emu/z.jpg", "dog/c.jpg", "emu/v1.jpg",
             "cat/v2.png"]
    return tmp_path / "images", _write_images(str(tmp_path / "images"), names)


def test_reads_both_splits_in_line_order(tmp_path, flat):
    root, written = flat
    train = tmp_path / "train.txt"
    train.write_text("# path label\n\ncat/b.jpg 0\n  dog/a.png\t1  \ncat/a.jpg 0\n"
                     "/emu/z.jpg 2\ndog/c.jpg   1\n")
    validation = tmp_path / "val.csv"
    validation.write_text("emu/v1.jpg,2\ncat/v2.png , 0\n")
    source = load_source(_list_name(root, train, validation))

    assert (source.info.num_train, source.info.num_validation) == (5, 2)
    assert source.info.class_names == ("cat", "dog", "emu")
    assert source.info.name == _list_name(root, train, validation)
    np.testing.assert_array_equal(source.train_labels(), [0, 1, 0, 2, 1])
    np.testing.assert_array_equal(source.validation_labels(), [2, 0])
    assert source.paths("train")[3] == os.path.join(str(root), "emu/z.jpg")
    assert list(source.file_names("train")) == ["b.jpg", "a.png", "a.jpg", "z.jpg", "c.jpg"]
    for split, order in (("train", ["cat/b.jpg", "dog/a.png", "cat/a.jpg", "emu/z.jpg",
                                    "dog/c.jpg"]), ("validation", ["emu/v1.jpg", "cat/v2.png"])):
        examples = _raw(source, split)
        assert [int(e["index"]) for e in examples] == list(range(len(order)))
        np.testing.assert_array_equal([e["label"] for e in examples], source.labels(split))
        for example, image in zip(examples, order):
            np.testing.assert_array_equal(example["image"], decoded(written[image]))


def test_class_name_file_and_relative_paths(tmp_path, flat):
    root, _ = flat
    (tmp_path / "train.txt").write_text("cat/a.jpg 3\ndog/c.jpg 1\n")
    (tmp_path / "names.txt").write_text("zero\none\n\ntwo\nthree\nfour\n")
    source = load_source("list:images?train=train.txt&classes=names.txt",
                         data_dir=str(tmp_path))
    assert source.info.class_names == ("zero", "one", "two", "three", "four")
    assert source.info.num_classes == 5 and source.info.num_validation == 0
    np.testing.assert_array_equal(source.train_labels(), [3, 1])
    (tmp_path / "names.txt").write_text("zero\none\nthree\n")
    with pytest.raises(DataError) as error:
        load_source("list:images?train=train.txt&classes=names.txt", data_dir=str(tmp_path))
    assert str(error.value).startswith(
        f"List file {tmp_path / 'train.txt'}, line 1: label 3 is out of range (1 such line): "
        f"the class-name file {tmp_path / 'names.txt'} has 3 classes, so labels must lie in "
        "[0, 3).")


def test_lists_with_a_byte_order_mark_are_read(tmp_path, flat):
    root, _ = flat
    (tmp_path / "train.txt").write_text("\ufeffcat/a.jpg 1\r\ndog/c.jpg 0\r\n",
                                        encoding="utf-8")
    (tmp_path / "names.txt").write_text("\ufeffdog\r\ncat\r\n", encoding="utf-8")
    source = load_source(_list_name(root, tmp_path / "train.txt",
                                    classes=tmp_path / "names.txt"))
    assert source.info.class_names == ("dog", "cat")
    assert source.paths("train")[0] == os.path.join(str(root), "cat/a.jpg")


def test_one_based_and_stray_labels_are_named(tmp_path, flat):
    root, _ = flat
    train = tmp_path / "train.txt"
    train.write_text("cat/a.jpg 1\ndog/c.jpg 2\n")
    with pytest.raises(DataError, match=rf"^List file {train}: no record has label 0 and the "
                                        r"labels run from 1 to 2: they appear to start at 1"):
        load_source(_list_name(root, train))
    train.write_text("cat/a.jpg 0\ndog/c.jpg 1\nemu/z.jpg 999\ncat/b.jpg 1\n")
    with pytest.raises(DataError, match=r"counted from the largest label, 999 at line 3, which "
                                        r"makes 1000 classes; 997 of them have no training "
                                        r"example .* name them in a class-name file"):
        load_source(_list_name(root, train))


def test_derived_names_fall_back_per_label(tmp_path):
    path = tmp_path / "list.txt"
    # 0: one folder; 1: two folders; 2 and 3 share a folder; 4: no image; 5: no folder.
    path.write_text("p/cat/1.jpg 0\np/cat/2.jpg 0\nq/dog/1.jpg 1\nr/dog/1.jpg 1\n"
                    "s/x/1.jpg 2\ns/x/2.jpg 3\nloose.jpg 5\nt/emu/1.jpg 6\n")
    listed = [parse_list_file(str(path))]
    assert derive_class_names(listed, 8) == (
        "cat", "class_1", "class_2", "class_3", "class_4", "class_5", "emu", "class_7")
    path.write_text("a/inn/outdoor/1.jpg 0\nb/bar/1.jpg 1\nh/hotel/outdoor/1.jpg 2\n")
    listed = [parse_list_file(str(path))]
    assert derive_class_names(listed, 3) == ("a/inn/outdoor", "b/bar", "h/hotel/outdoor")
    assert derive_class_names(listed, 3, strip_components=1) == (
        "inn/outdoor", "bar", "hotel/outdoor")


@pytest.mark.parametrize("line, reason", [
    ("cat/a.jpg", "has 1 fields instead of 2"),
    ("cat/a.jpg 1 2", "has 3 fields instead of 2"),
    ("cat/a.jpg,1,2", "has 3 fields instead of 2"),
    ("cat/a.jpg one", "has the label 'one', which is not an integer"),
    ("cat/a.jpg,1.5", "has the label '1.5', which is not an integer"),
    ("cat/a.jpg 1_0", "has the label '1_0', which is not an integer"),
    ("cat/a.jpg -1", "has the negative label -1"),
    (" , 1", "has an empty image path"),
])
def test_bad_line_is_named_with_its_number(tmp_path, flat, line, reason):
    root, _ = flat
    (tmp_path / "train.txt").write_text(f"# header\ncat/b.jpg 0\n\n{line}\ndog/c.jpg 1\n")
    with pytest.raises(DataError) as error:
        load_source(_list_name(root, tmp_path / "train.txt"))
    message = str(error.value)
    assert message.startswith(f"List file {tmp_path / 'train.txt'}, line 4: "
                              f"{line.strip()!r} {reason}. Each line of a list file is")
    assert "\n" not in message


def test_missing_images_are_counted_and_named(tmp_path, flat):
    root, _ = flat
    lines = ["cat/a.jpg 0", "cat/gone.jpg 0", "nowhere/x.jpg 1", "dog/c.jpg 1", "dog/a.jpg 1",
             "x/v3.png 2"]
    (tmp_path / "val.txt").write_text("# val list\n\n" + "\n".join(lines) + "\n")
    (tmp_path / "train.txt").write_text("cat/a.jpg 0\n")
    with pytest.raises(DataError) as error:
        load_source(_list_name(root, tmp_path / "train.txt", tmp_path / "val.txt"))
    assert str(error.value).startswith(
        f"List file {tmp_path / 'val.txt'}: 4 of 6 listed images do not exist under the image "
        f"root {root} (first: line 4: cat/gone.jpg; line 5: nowhere/x.jpg; line 7: dog/a.jpg). "
        "Check the image root")

    # Unchecked, the source opens and the missing file stops reading, by name.
    source = load_source(_list_name(root, tmp_path / "train.txt", tmp_path / "val.txt",
                                    check_files="no"))
    assert source.info.num_validation == 6
    with pytest.raises(DataError, match=f"file {root / 'cat' / 'gone.jpg'}"):
        _raw(source, "validation")


def test_duplicate_and_empty_lists(tmp_path, flat):
    root, _ = flat
    (tmp_path / "train.txt").write_text("cat/a.jpg 0\ndog/c.jpg 1\n# again\ncat/a.jpg,0\n")
    with pytest.raises(DataError) as error:
        load_source(_list_name(root, tmp_path / "train.txt"))
    assert str(error.value) == (
        f"List file {tmp_path / 'train.txt'} lists 'cat/a.jpg' twice, at lines 1 and 4; each "
        "image may be listed once per split. Remove the repeated lines.")
    (tmp_path / "train.txt").write_text("# nothing yet\n\n")
    with pytest.raises(DataError, match=r"train\.txt lists no images \(it is empty, or has "):
        load_source(_list_name(root, tmp_path / "train.txt"))
    with pytest.raises(DataError, match=r"Cannot read list file .*none\.txt: No such file"):
        load_source(_list_name(root, tmp_path / "none.txt"))


@pytest.mark.parametrize("query, message", [
    ("validation=v.txt", "needs an image root and a train list"),
    ("train=t.txt&colour=red", "'colour=red' is unknown; the query takes train=..., "),
    ("train=t.txt&train=u.txt", "'train=u.txt' is given twice"),
    ("train", "'train' is not key=value"),
    ("train=t.txt&check_files=maybe", "check_files=maybe must be yes or no"),
])
def test_bad_list_names(tmp_path, query, message):
    with pytest.raises(DataError, match=message):
        load_source(f"list:{tmp_path}?{query}")
    with pytest.raises(DataError, match="Image root .* does not exist"):
        load_source(f"list:{tmp_path / 'gone'}?train=t.txt")


@pytest.mark.parametrize("images_at, lists_at", [
    (("images256",), ()), ((DEEP, "images256"), ()), ((DEEP, "images256"), (DEEP,))])
def test_places205_layouts(tmp_path, images_at, lists_at):
    truth = _write_places(str(tmp_path / "places"), images_at, lists_at)
    source = load_source("places205:places", data_dir=str(tmp_path))
    assert source.info.name == f"places205:{tmp_path / 'places'}"
    assert source.info.num_classes == 205 and len(source.info.class_names) == 205
    names = source.info.class_names
    assert (names[0], names[8], names[17], names[109]) == (
        "abbey", "apartment_building/outdoor", "bar", "hotel/outdoor")
    assert names[1] == "class_1" and names[204] == "class_204"
    assert (source.info.num_train, source.info.num_validation) == (12, 4)
    for split, key in (("train", "train"), ("validation", "val")):
        np.testing.assert_array_equal(source.labels(split), [l for _, l, _ in truth[key]])
        examples = _raw(source, split)
        assert [int(e["index"]) for e in examples] == list(range(len(truth[key])))
        for example, (_, label, content) in zip(examples, truth[key]):
            assert example["label"] == label
            np.testing.assert_array_equal(example["image"], decoded(content))


def test_places205_errors_name_the_paths_tried(tmp_path):
    with pytest.raises(DataError) as error:
        load_source(f"places205:{tmp_path}")
    assert str(error.value).startswith(
        f"No Places205 image folder in {tmp_path}: tried {tmp_path / 'images256'} and "
        f"{tmp_path / DEEP / 'images256'}.")
    (tmp_path / DEEP / "images256").mkdir(parents=True)
    with pytest.raises(DataError) as error:
        load_source(f"places205:{tmp_path}")
    lists = "trainvalsplit_places205/train_places205.csv"
    assert str(error.value).startswith(
        f"No Places205 list file train_places205.csv for {tmp_path}: tried "
        f"{tmp_path / lists} and {tmp_path / DEEP / lists}.")
    with pytest.raises(DataError, match="Places205 folder .*gone does not exist"):
        load_source(f"places205:{tmp_path / 'gone'}")


def test_places205_label_out_of_range(tmp_path):
    _write_places(str(tmp_path))
    csv = tmp_path / "trainvalsplit_places205" / "val_places205.csv"
    csv.write_text(csv.read_text() + "a/abbey/val00000009.jpg 205\n")
    with pytest.raises(DataError) as error:
        load_source(f"places205:{tmp_path}?check_files=no")
    assert str(error.value).startswith(
        f"List file {csv}, line 5: label 205 is out of range (1 such line): the dataset has "
        "205 classes, so labels must lie in [0, 205).")


def _tfrecord_round_trip(source, out):
    records = load_source(f"tfrecord:{out}")
    assert records.info.class_names == source.info.class_names
    permutation = np.random.RandomState(0).permutation(source.info.num_train)
    for split, order in (("train", permutation),
                         ("validation", np.arange(source.info.num_validation))):
        np.testing.assert_array_equal(records.labels(split), source.labels(split)[order])
        listed = _raw(source, split)
        for example in _raw(records, split):
            original = listed[order[example["index"]]]
            np.testing.assert_array_equal(example["image"], original["image"])


def test_build_tfrecords_from_a_list_source(tmp_path, flat):
    root, _ = flat
    (tmp_path / "train.txt").write_text("cat/b.jpg 0\ndog/a.png 1\ncat/a.jpg 0\nemu/z.jpg 2\n")
    (tmp_path / "val.txt").write_text("emu/v1.jpg 2\ndog/c.jpg 1\n")
    source = ListSource(str(root), str(tmp_path / "train.txt"), str(tmp_path / "val.txt"))
    summary = build_tfrecords_from_source(source, str(tmp_path / "out"), train_shards=2,
                                          validation_shards=1, log=lambda line: None)
    assert (summary["num_train"], summary["num_validation"]) == (4, 2)
    # The PNG is stored as JPEG, so compare only the JPEG-born images exactly.
    records = load_source(f"tfrecord:{tmp_path / 'out'}")
    permutation = np.random.RandomState(0).permutation(4)
    np.testing.assert_array_equal(records.train_labels(), source.train_labels()[permutation])
    stored = {int(e["index"]): e["image"] for e in _raw(records, "train")}
    listed = _raw(source, "train")
    for index, p in enumerate(permutation):
        if p != 1:
            np.testing.assert_array_equal(stored[index], listed[p]["image"])


def test_build_tool_reads_places205(tmp_path):
    _write_places(str(tmp_path / "places"), ("data", "vision", "torralba", "deeplearning",
                                              "images256"))
    out = tmp_path / "records"
    code, stdout, stderr = run_main(BUILD, f"--dataset=places205:{tmp_path / 'places'}",
                                    f"--output_dir={out}", "--train_shards=3")
    assert code == 0, stderr
    assert stdout.startswith("12 training and 4 validation images of 205 classes in 3 + 4 ")
    _tfrecord_round_trip(load_source(f"places205:{tmp_path / 'places'}"), str(out))

    code, _, stderr = run_main(BUILD, f"--dataset=tfrecord:{out}", f"--output_dir={out}2")
    assert code == 1 and "build_tfrecords: Dataset tfrecord:" in stderr
    assert "is not read from image files" in stderr
    code, _, stderr = run_main(BUILD, f"--dataset=places205:{tmp_path / 'places'}",
                               f"--train_dir={tmp_path}", f"--output_dir={out}3")
    assert code == 1 and "Give either --train_dir or --dataset, not both" in stderr
    code, _, stderr = run_main(BUILD, f"--output_dir={out}3")
    assert code == 1 and stderr.startswith("build_tfrecords: Give either --train_dir or")


def test_places205_feeds_the_training_pipeline(tmp_path):
    _write_places(str(tmp_path))
    source = load_source(f"places205:{tmp_path}")
    with data_errors():
        batches = list(input_fns.make_train_input_fn(source, 4, 8, seed=0, epoch=0,
                                                    labelled_index=all_labelled(source))(None)
                       .as_numpy_iterator())
    assert len(batches) == 3
    index = np.concatenate([b["index"] for b in batches])
    assert sorted(index.tolist()) == list(range(12))
    for batch in batches:
        assert batch["image"].shape == (4, 8, 8, 3) and batch["image"].dtype == np.float32
        np.testing.assert_array_equal(batch["label"], source.train_labels()[batch["index"]])


# Slow: a run. make test keeps places205 feeding the training pipeline (above) and the train
# tool's runs on other sources.
@pytest.mark.slow
def test_train_tool_trains_on_places205(tmp_path):
    _write_places(str(tmp_path / "places"))
    code, stdout, stderr = run_main(
        TRAIN, f"--run_dir={tmp_path / 'run'}",
        f"--dataset=places205:{tmp_path / 'places'}", "--image_size=16",
        "--architecture=resnet10", "--width=0.125", "--small_inputs", "--embedding_dim=8",
        "--label_percent=50", "--global_batch_size=4", "--epochs=1", "--k=2", "--t=3",
        "--warmup_epochs=0")
    assert code == 0, stderr
    assert (f"places205:{tmp_path / 'places'}: 12 training examples used, 8 labelled, "
            "205 classes") in stdout
    assert "the run in" in stdout and "has trained 1 of 1 epoch" in stdout


@pytest.mark.parametrize("name", ["list:", "places205:"])
def test_empty_list_and_places205_names_are_unknown(name):
    with pytest.raises(DataError, match=f"Unknown dataset '{name}'. Dataset names have the "
                                        "forms .*list:<image root>.*places205:<folder>"):
        load_source(name)
