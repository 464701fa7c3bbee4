import numpy as np
import pytest

from llp_tf.after_training.transduction import contract


def test_check_inputs_converts_to_the_methods_dtypes():
    x, mask, labels = contract.check_inputs([[1.0, 0.0], [0.0, 1.0]], [1, 0], [2, -1], 3)
    assert (x.dtype, mask.dtype, labels.dtype) == (np.float64, bool, np.int64)
    assert mask.tolist() == [True, False] and labels.tolist() == [2, -1]


@pytest.mark.parametrize("mask, labels, message", [
    ([True], [0, 0], "Expected embeddings"),
    ([False, False], [0, 0], "No labelled point"),
    ([True, False], [3, 0], r"must lie in \[0, 3\)"),
    ([True, True], [0, -1], r"must lie in \[0, 3\)"),
])
def test_check_inputs_refuses(mask, labels, message):
    with pytest.raises(ValueError, match=message):
        contract.check_inputs(np.eye(2), mask, labels, 3)


def test_labelled_points_keep_their_labels():
    mask = np.array([True, False, True, False])
    labels = np.array([4, -1, 2, -1], np.int64)
    np.testing.assert_array_equal(contract.with_labelled([7, 9], mask, labels), [4, 7, 2, 9])
    assert labels.tolist() == [4, -1, 2, -1]  # the input is not changed
