"""The checked decode: records of static-shaped results checked in groups,
in order, naming the one record that cannot be decoded."""

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data.decoding import decode
from llp_tf.errors import DataError

COUNT = 2 * decode.GROUP_SIZE + 5  # two whole groups and a part


def _png(value):
    return tf.io.encode_png(np.full([2, 2, 3], value, np.uint8)).numpy()


def _records(bad=()):
    data = [b"not an image" if i in bad else _png(i) for i in range(COUNT)]
    return tf.data.Dataset.from_tensor_slices({"index": np.arange(COUNT), "data": data})


def _ragged_load(record):
    return decode.decode_image(record["data"])


def _static_load(record):
    return tf.reshape(_ragged_load(record), [2, 2, 3])


def _describe(record):
    return tf.strings.join(["record ", tf.strings.as_string(record["index"])])


def _checked(records, load_fn=_static_load):
    dataset = decode.decode_checked(records, load_fn, _describe, "Fix it.")
    with decode.data_errors():
        return [(int(record["index"]), image.numpy()) for record, image in dataset]


def test_static_results_come_in_order():
    decoded = _checked(_records())
    assert [index for index, _ in decoded] == list(range(COUNT))
    assert all((image == index).all() and image.shape == (2, 2, 3) for index, image in decoded)


@pytest.mark.parametrize("bad", [0, decode.GROUP_SIZE + 3, COUNT - 1])
@pytest.mark.parametrize("load_fn", [_static_load, _ragged_load], ids=["group", "each"])
def test_the_record_that_fails_is_named(bad, load_fn):
    with pytest.raises(DataError, match=rf"^Cannot read or decode the image of record {bad}: it "
                                        r"is missing, .* Fix it\.$"):
        _checked(_records(bad={bad}), load_fn)


@pytest.mark.parametrize("load_fn", [_static_load, _ragged_load], ids=["static", "ragged"])
def test_decodable_marks_each_bad_record_of_a_group(load_fn):
    # decodable's results (a bool each) are static, so it checks in groups;
    # a load of static shape must still be run, not pruned.
    bad = {1, decode.GROUP_SIZE + 3, COUNT - 1}
    marks = [bool(ok) for _, ok in decode.decodable(_records(bad), load_fn)]
    assert marks == [i not in bad for i in range(COUNT)]
