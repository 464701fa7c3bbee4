"""The checkpoint view of one bank state variable held in contiguous row parts (the shards of
`sharded_bank.ShardedMemoryBank`): each part is saved as a slice of one checkpoint key, the
key under which `memory_bank.MemoryBank` saves the variable whole, and restored as the slice
of the rows it owns now. Either bank thus restores the other's checkpoint at any part count.

Save and restore use TensorFlow's sliced-variable format (the one of partitioned variables):
a `SaveableObject` with one `SaveSpec` per part, slice spec ``"N d... start,length:-..."``.
Not `Trackable._serialize_to_tensors`: its restore hands `_restore_from_tensors` only the
first slice of a key. A checkpoint of another row count fails in TensorFlow's reader
(`tf.errors.InvalidArgumentError`, naming both shapes)."""

from typing import Any, Callable, Optional, Sequence

import tensorflow as tf
# TensorFlow's SaveableObject and SaveSpec have no public name.
from tensorflow.python.training.saving import saveable_object

from llp_tf.tensor_types import Array, Tensor


def slice_spec(full_shape: tuple[int, ...], start: int, stop: int) -> str:
    """The checkpoint slice spec of rows ``[start, stop)`` of a tensor of ``full_shape``: the
    full shape, then ``start,length`` for axis 0 and ``-`` (whole) for the others."""
    axes = [f"{start},{stop - start}"] + ["-"] * (len(full_shape) - 1)
    return " ".join(str(size) for size in full_shape) + " " + ":".join(axes)


class SlicedState(tf.__internal__.tracking.Trackable):
    """A variable of shape [N, ...] held in parts, the rows ``all_bounds`` [(start, stop)]
    that tile ``[0, N)`` in order, of which this process holds ``parts``, the ones from
    ``all_bounds[first]`` on (all of them on one machine; a worker's own across workers).
    Checkpoints save each of its non-empty parts as its slice of the key and restore into
    each part its slice alone (module docstring). ``read_value`` and ``numpy`` concatenate
    this process's parts on the host (evaluation's reads on one machine, not checkpoints')."""

    def __init__(self, parts: list[tf.Variable], all_bounds: list[tuple[int, int]],
                 first: int = 0) -> None:
        self._parts, self._bounds = parts, all_bounds[first:first + len(parts)]
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

    def saved_slices(self) -> list[tuple[str, Callable[[], tf.Tensor]]]:
        """(slice spec, read of the part) of each of this process's parts that has rows."""
        return [(spec, part.read_value) for part, spec in self._saved_parts()]

    def saved_rows(self) -> list[tuple[int, int]]:
        """The rows [start, stop) of each of this process's parts that has rows, in the order
        of `saved_slices`."""
        return [(start, stop) for start, stop in self._bounds if stop > start]

    def _gather_saveables_for_checkpoint(self):
        return {"VARIABLE_VALUE": lambda name: _SlicesSaveable(self, name)}

    def _saved_parts(self) -> list[tuple[tf.Variable, str]]:
        """(part, slice spec) of each part that has rows."""
        return [(part, slice_spec(self._full_shape, start, stop))
                for part, (start, stop) in zip(self._parts, self._bounds) if stop > start]


tf.register_tensor_conversion_function(
    SlicedState, lambda value, dtype=None, name=None, as_ref=False: value.read_value())


class _SlicesSaveable(saveable_object.SaveableObject):
    """``state``'s parts as slices of the checkpoint key ``name``; each part's tensor is read
    from its variable only when the checkpoint is written. A state of no rows saves the key
    whole and empty."""

    def __init__(self, state: SlicedState, name: str) -> None:
        saved = state._saved_parts()
        self._parts = [part for part, _ in saved]
        specs = [saveable_object.SaveSpec(part.read_value, spec, name, dtype=part.dtype,
                                          device=part.device) for part, spec in saved]
        if not saved:
            specs = [saveable_object.SaveSpec(tf.zeros(state.shape, state.dtype), "", name)]
        super().__init__(state, specs, name)

    def restore(self, restored_tensors: Sequence[Tensor],
                restored_shapes: Optional[Sequence[Any]] = None) -> tf.Operation:
        """Assigns each part its slice (``restored_tensors`` in the specs' order)."""
        del restored_shapes
        if not self._parts and restored_tensors[0].shape[0]:
            raise ValueError(f"the checkpoint's {self.name} has {restored_tensors[0].shape[0]} "
                             "rows where this bank has none")
        return tf.group([part.assign(value)
                         for part, value in zip(self._parts, restored_tensors)])
