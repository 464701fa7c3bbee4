"""The checkpoint view of one bank state variable held in contiguous row parts (the shards of
`sharded_bank.ShardedMemoryBank`, or `memory_bank.MemoryBank`'s one part of every row):
the state is saved as slices of one checkpoint key, the key of the replicated bank's variable
(``bank/embeddings/.ATTRIBUTES/VARIABLE_VALUE``, full shape [N, ...]), each slice a part's
rows within one of the fixed `row_blocks`; a restore reads, block by block, the rows each
part owns now. Either bank thus restores the other's checkpoint at any part count.

`SlicedState`s are checkpointed by a saver registered with TensorFlow (`SAVER_NAME`): in any
`tf.train.Checkpoint` save it writes the blocks, each SaveV2 at most `row_blocks.BLOCK_BYTES`
of rows read by a gather (a whole read of a scattered-into variable would copy it), in the
save's temporary folder, merged by TensorFlow with the rest into one checkpoint prefix; its
restore runs after the rest's. A checkpoint written before blocks (a key whole, or a slice
per shard) restores too, each part's rows in one read: the stored slices it overlaps are
read whole. A checkpoint of another row count fails in TensorFlow's reader
(`tf.errors.InvalidArgumentError`, naming both shapes); one of another dtype (the embeddings
stored at another `bank_dtype`) restores converted, each block read in its stored dtype and
cast to the state's (rounded to nearest when narrowing)."""

import os
from collections.abc import Mapping

import numpy as np
import tensorflow as tf
# TensorFlow's registry of checkpoint savers has no public name.
from tensorflow.python.saved_model import registration

from llp_tf.core import row_blocks
from llp_tf.tensor_types import Array

#: The registered saver's name, recorded in each checkpoint's object graph.
SAVER_NAME = "llp_tf.bank_blocks"
#: The end of a state's checkpoint key after its object path.
VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def slice_spec(full_shape: tuple[int, ...], start: int, stop: int) -> str:
    """The checkpoint slice spec of rows ``[start, stop)`` of a tensor of ``full_shape``: the
    full shape, then ``start,length`` for axis 0 and ``-`` (whole) for the others."""
    axes = [f"{start},{stop - start}"] + ["-"] * (len(full_shape) - 1)
    return " ".join(str(size) for size in full_shape) + " " + ":".join(axes)


def _copies(variable: tf.Variable) -> tuple[tf.Variable, ...]:
    """The variables holding ``variable``'s value: each replica's of a mirrored one."""
    return tuple(getattr(variable, "values", (variable,)))


class SlicedState(tf.__internal__.tracking.Trackable):
    """A variable of shape [N, ...] held in parts, the rows ``all_bounds`` [(start, stop)]
    that tile ``[0, N)`` in order, of which this process holds ``parts``, the ones from
    ``all_bounds[first]`` on (all of them on one machine; a worker's own across workers).
    Checkpoints save and restore it in blocks (module docstring). ``read_value`` and
    ``numpy`` concatenate this process's parts on the host (evaluation's reads on one
    machine, not checkpoints')."""

    def __init__(self, parts: list[tf.Variable], all_bounds: list[tuple[int, int]],
                 first: int = 0) -> None:
        self._parts, self._bounds = parts, all_bounds[first:first + len(parts)]
        self._first = first
        self._full_shape = (all_bounds[-1][1],) + tuple(parts[0].shape[1:])

    def read_value(self) -> tf.Tensor:
        with tf.device("CPU:0"):
            return tf.concat([tf.convert_to_tensor(part) for part in self._parts], axis=0)

    def numpy(self) -> Array:
        return self.read_value().numpy()

    @property
    def shape(self) -> tf.TensorShape:
        return tf.TensorShape(self._full_shape)

    @property
    def dtype(self) -> tf.DType:
        return self._parts[0].dtype

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return int(np.prod(self._full_shape[1:], dtype=np.int64)) * self.dtype.size

    @property
    def block_rows(self) -> int:
        """Rows of one of this state's `row_blocks`."""
        return row_blocks.block_rows(self.row_bytes)

    @property
    def holds_first_part(self) -> bool:
        """Whether this process holds part 0 (every process on one machine; the chief)."""
        return self._first == 0

    def part_rows(self) -> list[tuple[int, int]]:
        """The rows [start, stop) of each of this process's parts that has rows."""
        return [(start, stop) for start, stop in self._bounds if stop > start]

    def saved_rows(self) -> list[tuple[int, int]]:
        """The slices this process saves: its parts' rows cut at the blocks, in order."""
        return [piece for start, stop in self.part_rows()
                for piece in row_blocks.block_slices(start, stop, self.block_rows)]

    def read_rows(self, start: int, stop: int) -> tf.Tensor:
        """Rows ``[start, stop)``, within one of this process's parts, gathered from its
        variable (from replica 0's copy of a mirrored one): [stop - start, ...]."""
        part, offset = self._part(start, stop)
        return tf.raw_ops.ResourceGather(
            resource=_copies(part)[0].handle, dtype=self.dtype,
            indices=tf.range(start - offset, stop - offset, dtype=tf.int64))

    def write_rows(self, start: int, rows: tf.Tensor) -> None:
        """Writes ``rows`` [n, ...] at rows ``[start, start + n)``, within one of this
        process's parts, into its variable (every replica's copy) in place."""
        part, offset = self._part(start, start + int(rows.shape[0]))
        for copy in _copies(part):
            tf.raw_ops.ResourceStridedSliceAssign(
                ref=copy.handle, begin=[start - offset], end=[start - offset + rows.shape[0]],
                strides=[1], value=rows)

    def _part(self, start: int, stop: int) -> tuple[tf.Variable, int]:
        """(the part holding rows ``[start, stop)``, its first row)."""
        for part, (first, last) in zip(self._parts, self._bounds):
            if first <= start and stop <= last:
                return part, first
        raise ValueError(f"rows [{start}, {stop}) are not within one part of {self._bounds}")

    def _gather_saveables_for_checkpoint(self):
        # Marks the state as holding a value, so that a restore's
        # `assert_existing_objects_matched` requires it matched. The registered saver
        # writes and reads it; TensorFlow calls no SaveableObject factory of it.
        return {"VARIABLE_VALUE": _no_saveable}


def _no_saveable(name: str):
    raise TypeError(f"{name} is saved by the registered saver {SAVER_NAME}, in blocks, only.")


tf.register_tensor_conversion_function(
    SlicedState, lambda value, dtype=None, name=None, as_ref=False: value.read_value())


def save_blocks(states: Mapping[str, SlicedState], folder: str) -> list[str]:
    """Writes this process's `SlicedState.saved_rows` of ``states`` (checkpoint key -> state)
    as slices of their keys, with SaveV2 calls of at most `row_blocks.BLOCK_BYTES` of rows,
    each its own checkpoint prefix in ``folder``; returns the prefixes in order. A state of
    no rows at all is saved whole and empty by the process that holds its first part."""
    calls, call, size = [], [], 0
    for key, state in states.items():
        if not state.shape[0] and state.holds_first_part:
            calls.append([(key, "", lambda state=state: tf.zeros(state.shape, state.dtype))])
        row_bytes = state.row_bytes + row_blocks.INDEX_BYTES
        for start, stop in state.saved_rows():
            if call and size + (stop - start) * row_bytes > row_blocks.BLOCK_BYTES:
                calls.append(call)
                call, size = [], 0
            call.append((key, slice_spec(tuple(state.shape), start, stop),
                         lambda state=state, start=start, stop=stop: state.read_rows(start, stop)))
            size += (stop - start) * row_bytes
    calls += [call] if call else []
    os.makedirs(folder, exist_ok=True)
    prefixes = []
    for number, saved in enumerate(calls):
        prefixes.append(os.path.join(folder, f"bank-blocks-{number:05d}"))
        with tf.device("CPU:0"):
            tf.raw_ops.SaveV2(prefix=prefixes[-1], tensor_names=[key for key, _, _ in saved],
                              shape_and_slices=[spec for _, spec, _ in saved],
                              tensors=[read() for _, _, read in saved])
    return prefixes


def restore_blocks(states: Mapping[str, SlicedState], prefix: str,
                   in_blocks: bool = True) -> None:
    """Restores this process's rows of ``states`` (checkpoint key -> state) from the
    checkpoint ``prefix``, one RestoreV2 of one block at a time (``in_blocks``), or of each
    part's rows whole (a checkpoint written before blocks, whose stored slices are read
    whole anyway); a block stored in another dtype is cast to the state's."""
    stored_dtypes = tf.train.load_checkpoint(prefix).get_variable_to_dtype_map()
    for key, state in states.items():
        shape, dtype = tuple(state.shape), stored_dtypes.get(key, state.dtype)
        if not shape[0]:
            with tf.device("CPU:0"):
                stored, = tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[key],
                                               shape_and_slices=[""], dtypes=[dtype])
            if stored.shape[0]:
                raise ValueError(f"the checkpoint's {key} has {stored.shape[0]} rows where "
                                 "this bank has none")
            continue
        for start, stop in state.saved_rows() if in_blocks else state.part_rows():
            with tf.device("CPU:0"):
                rows, = tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[key],
                                             shape_and_slices=[slice_spec(shape, start, stop)],
                                             dtypes=[dtype])
                rows = tf.cast(rows, state.dtype)
            state.write_rows(start, rows)
            del rows


def _key(name: str) -> str:
    """The checkpoint key of the state the registered saver names ``name``: its object path
    (a block checkpoint), or the key itself (a checkpoint written before blocks)."""
    return name if VALUE_SUFFIX in name else name + VALUE_SUFFIX


def _path(prefix: tf.Tensor) -> str:
    if not tf.executing_eagerly():
        raise RuntimeError("A bank's state is saved and restored eagerly, not in a tf.function.")
    return prefix.numpy().decode()


def _save(trackables: Mapping[str, SlicedState], file_prefix: tf.Tensor) -> list[tf.Tensor]:
    """The registered save: the blocks in the folder of the save's temporary files (the
    checkpoint's prefix then ``_temp``, deleted by TensorFlow's merge)."""
    checkpoint = _path(file_prefix).removesuffix("-" + SAVER_NAME)
    prefixes = save_blocks({_key(name): state for name, state in trackables.items()},
                           checkpoint + "_temp")
    return [tf.constant(prefix) for prefix in prefixes]


def _restore(trackables: Mapping[str, SlicedState], merged_prefix: tf.Tensor) -> None:
    prefix = _path(merged_prefix)
    for name, state in trackables.items():
        restore_blocks({_key(name): state}, prefix, in_blocks=VALUE_SUFFIX not in name)


registration.register_checkpoint_saver(
    package=SAVER_NAME.split(".")[0], name=SAVER_NAME.split(".")[1],
    predicate=lambda trackable: isinstance(trackable, SlicedState),
    save_fn=_save, restore_fn=_restore)
