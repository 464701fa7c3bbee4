"""Rows of a 2-D .npy file on disk, read and written with ``os.preadv`` / ``os.pwrite``,
not a memory map, whose touched pages would count towards the probe's RSS (20 GB for one
pass over a Places205 cache)."""

import os

import numpy as np

from llp_tf.errors import DataError
from llp_tf.tensor_types import Array


def _contiguous_runs(sorted_rows):
    """(first position, length) of each run of consecutive numbers of ``sorted_rows``."""
    if sorted_rows.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(sorted_rows) != 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [sorted_rows.size]])
    return list(zip(starts.tolist(), (ends - starts).tolist()))


def _read_header(path):
    """(shape, dtype, byte offset of the data) of a C-ordered .npy file."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, fortran_order, dtype = read(f)
            offset = f.tell()
    except (OSError, ValueError) as error:
        raise DataError(f"Cannot read the array file {path}: {error}.") from None
    if fortran_order or len(shape) != 2:
        raise DataError(f"{path} must hold a C-ordered 2-D array; it holds shape {shape}.")
    size = os.path.getsize(path)
    if size < offset + shape[0] * shape[1] * dtype.itemsize:
        raise DataError(f"{path} is truncated: {size} bytes for an array of shape {shape}.")
    return shape, dtype, offset


class NpyRows:
    """Read-only rows of a .npy file [N, F]: ``rows[a:b]`` and ``rows[index]`` (int array,
    any order) return new arrays; each run of consecutive rows is one read."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.shape, self.dtype, self._offset = _read_header(path)
        self.ndim = 2
        self._row_bytes = self.shape[1] * self.dtype.itemsize
        self._file = open(path, "rb")

    def __len__(self) -> int:
        return self.shape[0]

    def close(self) -> None:
        """Closes the file; reads fail afterwards."""
        self._file.close()

    def _read_run(self, out, first_row):
        view = memoryview(out.reshape(-1).view(np.uint8))
        position = self._offset + first_row * self._row_bytes
        while len(view):  # a read may return fewer bytes than asked (over 2 GB at once)
            count = os.preadv(self._file.fileno(), [view], position)
            if count <= 0:
                raise DataError(f"{self.path} ended early at byte {position}.")
            view, position = view[count:], position + count

    def __getitem__(self, key: slice | Array) -> Array:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if step != 1:
                raise IndexError("NpyRows slices must have step 1.")
            out = np.empty((max(stop - start, 0), self.shape[1]), self.dtype)
            if len(out):
                self._read_run(out, start)
            return out
        rows = np.asarray(key, np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= self.shape[0]):
            raise IndexError(f"row index out of range [0, {self.shape[0]}).")
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        out = np.empty((rows.size, self.shape[1]), self.dtype)
        block = np.empty_like(out)
        for first, length in _contiguous_runs(sorted_rows):
            self._read_run(block[:length], int(sorted_rows[first]))
            out[order[first:first + length]] = block[:length]
        return out


class NpyRowWriter:
    """Writes the rows of a new, preallocated [N, F] .npy file ``path`` by position."""

    def __init__(self, path: str, num_rows: int, num_columns: int,
                 dtype: np.dtype = np.float32) -> None:
        np.lib.format.open_memmap(path, mode="w+", dtype=dtype,
                                  shape=(int(num_rows), int(num_columns)))
        self.path = path
        self.shape = (int(num_rows), int(num_columns))
        self.dtype = np.dtype(dtype)
        _, _, self._offset = _read_header(path)
        self._row_bytes = self.shape[1] * self.dtype.itemsize
        self._file = open(path, "r+b")

    def write(self, rows: Array, values: Array) -> None:
        """Writes ``values[i]`` ([k, F]) to row ``rows[i]`` (int [k], distinct)."""
        rows = np.asarray(rows, np.int64).reshape(-1)
        values = np.asarray(values, self.dtype).reshape(rows.size, self.shape[1])
        order = np.argsort(rows, kind="stable")
        sorted_rows, sorted_values = rows[order], values[order]
        for first, length in _contiguous_runs(sorted_rows):
            data = np.ascontiguousarray(sorted_values[first:first + length]).tobytes()
            os.pwrite(self._file.fileno(), data,
                      self._offset + int(sorted_rows[first]) * self._row_bytes)

    def close(self) -> None:
        """Flushes the rows to disk (``fsync``) and closes the file."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
