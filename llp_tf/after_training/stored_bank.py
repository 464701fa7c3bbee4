"""A run's memory bank read from a checkpoint, not restored: `StoredBank` reads the rows it is
asked for through the checkpoint's fixed row blocks (`llp_tf.core.row_blocks`), keeping at
most one stored block of each state in memory, so that no reader holds the whole bank unless
it asks for a whole state. A checkpoint written before blocks stores each state whole (or a
slice per shard); it is read a state at a time, whole. Embeddings stored at half precision
(`bank_dtype`) are read in their stored blocks and come back as float32."""

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from llp_tf.core import row_blocks
from llp_tf.core.bank import BankRows
from llp_tf.core.bank_slices import SAVER_NAME, VALUE_SUFFIX, slice_spec
from llp_tf.errors import ConfigError
from llp_tf.tensor_types import Array

#: The checkpoint item of a method's bank.
BANK_ITEM = "bank"
#: The bank's states of N rows a reader may ask for, by name, and the dtypes it returns them
#: in (whatever their stored dtype).
ROW_STATES = {"embeddings": tf.float32, "labels": tf.int64, "confidence": tf.float32,
              "is_labelled": tf.bool}
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


def _key(name: str) -> str:
    return f"{BANK_ITEM}/{name}{VALUE_SUFFIX}"


def _written_in_blocks(object_graph: bytes) -> bool:
    """Whether the bank of the checkpoint of ``object_graph`` (its serialised object graph)
    was saved by the block saver (`bank_slices.SAVER_NAME`)."""
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(object_graph)
    return any(node.registered_saver.name == SAVER_NAME for node in graph.nodes
               if node.HasField("registered_saver"))


class StoredBank(BankRows, Mapping):
    """The bank of the checkpoint ``checkpoint`` (a prefix), N rows of D: every row is held
    (`held_rows` is ``[0, N)``) and read on demand, in the dtypes of `ROW_STATES`;
    ``stored_dtypes`` are the checkpoint's. As a mapping, ``bank[name]`` is a whole state of
    `ROW_STATES` (N rows, read when asked), and ``bank["examples"]`` the training example of
    each row, ``examples`` int64 [N].

    Raises:
      ConfigError: the checkpoint has no bank, or one of other than N rows.
    """

    def __init__(self, checkpoint: str, examples: Array) -> None:
        reader = tf.train.load_checkpoint(checkpoint)
        shapes = reader.get_variable_to_shape_map()
        if _key("embeddings") not in shapes:
            raise ConfigError(f"The checkpoint {checkpoint} holds no memory bank.")
        self.num_examples, self.dim = (int(size) for size in shapes[_key("embeddings")])
        if self.num_examples != len(examples):
            raise ConfigError(
                f"The checkpoint {checkpoint}'s bank has {self.num_examples} rows where its run "
                f"uses {len(examples)} examples: it is not this run's checkpoint.")
        self.checkpoint = checkpoint
        dtypes = reader.get_variable_to_dtype_map()
        self.stored_dtypes = {name: dtypes.get(_key(name), dtype)
                              for name, dtype in ROW_STATES.items()}
        self.examples = np.asarray(examples, np.int64)
        self._in_blocks = _written_in_blocks(reader.get_tensor(_OBJECT_GRAPH_KEY))
        self._cached: dict[str, tuple[int, Array]] = {}

    @property
    def held_rows(self) -> tuple[int, int]:
        return 0, self.num_examples

    def block_rows(self, name: str) -> int:
        """Rows of one stored block of the state ``name`` (of its stored dtype's bytes)."""
        dtype = self.stored_dtypes[name]
        return row_blocks.block_rows(dtype.size * (self.dim if name == "embeddings" else 1))

    def read_rows(self, names: Sequence[str], start: int, stop: int) -> dict[str, Array]:
        """`BankRows.read_rows`: each state's rows cut from the stored blocks they lie in."""
        if not 0 <= start <= stop <= self.num_examples:
            raise ValueError(f"rows [{start}, {stop}) are not within [0, {self.num_examples}).")
        read = {}
        for name in names:
            size, pieces = self._stored_rows(name), []
            for first, last in row_blocks.block_slices(start, stop, size):
                block_start, block = self._block_of(name, first, size)
                pieces.append(block[first - block_start:last - block_start])
            read[name] = np.concatenate(pieces) if pieces else np.empty(
                (0,) + self._row_shape(name), ROW_STATES[name].as_numpy_dtype)
        return read

    def rows_at(self, names: Sequence[str], rows: Array) -> dict[str, Array]:
        """name -> the states ``names`` at the rows ``rows`` int [k] (any order), read block
        by block: [k, ...] each, in the order of ``rows``."""
        rows = np.asarray(rows, np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= self.num_examples):
            raise ValueError(f"rows must lie within [0, {self.num_examples}).")
        gathered = {name: np.empty((rows.size,) + self._row_shape(name),
                                   ROW_STATES[name].as_numpy_dtype) for name in names}
        order = np.argsort(rows, kind="stable")
        for name in names:
            size = self._stored_rows(name)
            blocks = rows[order] // size
            for block in np.unique(blocks):
                chosen = order[blocks == block]
                block_start, values = self._block_of(name, int(block) * size, size)
                gathered[name][chosen] = values[rows[chosen] - block_start]
        return gathered

    def __getitem__(self, name: str) -> Array:
        if name == "examples":
            return self.examples
        if name not in ROW_STATES:
            raise KeyError(name)
        return self.read_rows([name], 0, self.num_examples)[name]

    def __iter__(self) -> Iterator[str]:
        return iter([*ROW_STATES, "examples"])

    def __len__(self) -> int:
        return len(ROW_STATES) + 1

    def _row_shape(self, name: str) -> tuple[int, ...]:
        return (self.dim,) if name == "embeddings" else ()

    def _stored_rows(self, name: str) -> int:
        """Rows of the stored pieces read at a time: a block, or a whole state written before
        blocks."""
        return self.block_rows(name) if self._in_blocks else max(self.num_examples, 1)

    def _block_of(self, name: str, row: int, rows: int) -> tuple[int, Array]:
        """(first row, values in `ROW_STATES`' dtype) of the stored block of ``rows`` rows
        holding ``row``, read once while readers stay in it (one block of each state
        cached)."""
        start = row // rows * rows
        cached = self._cached.get(name)
        if cached is None or cached[0] != start:
            self._cached.pop(name, None)
            stop = min(start + rows, self.num_examples)
            shape = (self.num_examples,) + self._row_shape(name)
            with tf.device("CPU:0"):
                values, = tf.raw_ops.RestoreV2(
                    prefix=self.checkpoint, tensor_names=[_key(name)],
                    shape_and_slices=[slice_spec(shape, start, stop)],
                    dtypes=[self.stored_dtypes[name]])
                values = tf.cast(values, ROW_STATES[name])
            cached = self._cached[name] = (start, values.numpy())
        return cached
