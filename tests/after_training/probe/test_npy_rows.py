import numpy as np
import pytest

from llp_tf.after_training.probe.npy_rows import NpyRowWriter, NpyRows
from llp_tf.errors import DataError


def _written(tmp_path, values, order):
    """The path of a .npy whose rows were written in ``order``, in uneven batches."""
    path = str(tmp_path / "rows.npy")
    writer = NpyRowWriter(path, len(values), values.shape[1])
    for rows in np.array_split(order, [3, 4, 11, 12]):
        writer.write(rows, values[rows])
    writer.close()
    return path


def test_rows_written_in_any_order_make_the_array(tmp_path):
    rng = np.random.default_rng(0)
    values = rng.normal(size=(20, 5)).astype(np.float32)
    # Runs of consecutive rows and scattered rows, in one order.
    order = np.concatenate([[7, 8, 9], [0], [19, 3, 2, 1], rng.permutation(
        [4, 5, 6, 10, 11, 12, 13, 14, 15, 16, 17, 18])])
    path = _written(tmp_path, values, order)
    loaded = np.load(path)  # a standard .npy file
    assert loaded.dtype == np.float32 and loaded.shape == (20, 5)
    np.testing.assert_array_equal(loaded, values)


def test_reads_slices_and_indices_like_numpy(tmp_path):
    values = np.arange(60, dtype=np.float32).reshape(12, 5) * 1.5
    path = _written(tmp_path, values, np.arange(12))
    rows = NpyRows(path)
    assert rows.shape == (12, 5) and len(rows) == 12 and rows.ndim == 2
    np.testing.assert_array_equal(rows[3:9], values[3:9])
    np.testing.assert_array_equal(rows[10:100], values[10:])
    assert rows[5:5].shape == (0, 5)
    index = np.array([11, 0, 1, 2, 7, 7, 5])  # unsorted, runs, a repeat
    np.testing.assert_array_equal(rows[index], values[index])
    read = rows[np.array([4, 2])]
    read[0] = -1.0  # a new, writable array: the file is untouched
    np.testing.assert_array_equal(rows[4:5], values[4:5])
    with pytest.raises(IndexError):
        rows[np.array([12])]
    rows.close()


def test_truncated_or_wrong_files_are_data_errors(tmp_path):
    path = _written(tmp_path, np.ones((20, 4), np.float32), np.arange(20))
    with open(path, "r+b") as f:
        f.truncate(200)
    with pytest.raises(DataError, match="truncated"):
        NpyRows(path)
    np.save(tmp_path / "flat.npy", np.zeros(6, np.float32))
    with pytest.raises(DataError, match="2-D array"):
        NpyRows(str(tmp_path / "flat.npy"))
    with pytest.raises(DataError, match="Cannot read"):
        NpyRows(str(tmp_path / "missing.npy"))
