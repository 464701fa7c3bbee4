"""Embedded datasets: real digits, the documented stratified split, index order."""

import gzip

import numpy as np

from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.sources import embedded
from llp_tf.data.sources.registry import load_source


def _documented_split(labels):
    """The rule written in llp_tf/data/sources/embedded.py's docstring, spelled out again."""
    validation, seen = [], {}
    for row, label in enumerate(labels):
        seen[label] = seen.get(label, 0) + 1
        if seen[label] % 5 == 0:
            validation.append(row)
    train = [row for row in range(len(labels)) if row not in set(validation)]
    permutation = np.random.RandomState(0).permutation(len(train))
    return np.asarray(train)[permutation], np.asarray(validation)


def test_mnist5k_matches_the_csv(mnist5k):
    with gzip.open(embedded.mnist5k_file(), "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    pixels, labels = table[:, :-1].reshape(-1, 28, 28), table[:, -1]
    train_rows, validation_rows = _documented_split(labels)

    info = mnist5k.info
    assert (info.name, info.num_classes, info.num_train, info.num_validation) == \
        ("mnist5k", 10, 4000, 1000)
    assert info.image_size == (28, 28) and info.channels == 1
    np.testing.assert_array_equal(mnist5k.train_labels(), labels[train_rows])
    np.testing.assert_array_equal(mnist5k.validation_labels(), labels[validation_rows])
    assert np.all(np.bincount(mnist5k.train_labels()) == 400)
    assert np.all(np.bincount(mnist5k.validation_labels()) == 100)

    with data_errors():
        examples = mnist5k.raw_dataset("train").batch(4000).get_single_element()
    np.testing.assert_array_equal(examples["index"], np.arange(4000))
    np.testing.assert_array_equal(examples["label"], labels[train_rows])
    expected = np.repeat(pixels[train_rows][..., None], 3, axis=-1)
    np.testing.assert_array_equal(examples["image"], expected)


def test_digits(tfds_dir):
    from sklearn.datasets import load_digits

    digits = load_digits()
    source = load_source("digits", data_dir=tfds_dir)
    train_rows, validation_rows = _documented_split(digits.target)
    counts = (source.info.num_train, source.info.num_validation)
    assert counts == (1442, 355) == (len(train_rows), len(validation_rows))
    assert source.info.image_size == (8, 8)
    np.testing.assert_array_equal(source.train_labels(), digits.target[train_rows])
    np.testing.assert_array_equal(source.validation_labels(), digits.target[validation_rows])
    with data_errors():
        first = next(source.raw_dataset("validation").as_numpy_iterator())
    row = validation_rows[0]
    expected = np.round(digits.images[row] * 255 / 16).astype(np.uint8)
    np.testing.assert_array_equal(first["image"], np.repeat(expected[..., None], 3, axis=-1))


def test_prepared_once(mnist5k, tfds_dir):
    again = load_source("mnist5k", data_dir=tfds_dir)
    np.testing.assert_array_equal(again.train_labels(), mnist5k.train_labels())
