"""The class test of a bank label, in TensorFlow and its numpy twin."""

import numpy as np

from llp_tf.core import label_encoding


def test_is_class_and_its_numpy_twin_agree():
    labels = np.array([0, 3, 4, 9, 2, -1, 4 + 1_000_000])
    want = [True, True, False, False, True, False, False]  # C = 4: 4 and above are ids
    np.testing.assert_array_equal(label_encoding.is_class(labels, 4).numpy(), want)
    np.testing.assert_array_equal(label_encoding.is_class_np(labels, 4), want)
    np.testing.assert_array_equal(label_encoding.is_class_np(labels.reshape(7, 1), 4),
                                  np.reshape(want, (7, 1)))


def test_classes_or_fills_instance_ids():
    labels = np.array([0, 3, 4, 9, 2, -1])
    got = label_encoding.classes_or(labels, 4)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [0, 3, -1, -1, 2, -1])
    np.testing.assert_array_equal(label_encoding.classes_or(labels, 4, fill=7),
                                  [0, 3, 7, 7, 2, 7])
    np.testing.assert_array_equal(label_encoding.instance_labels([0, 5], 4).numpy(), [4, 9])
