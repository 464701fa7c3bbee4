"""A checkpoint whose sharded state the workers of a cluster write together: each worker
writes the slices of its own rows (`bank_slices.SlicedState`) into a part, the chief merges
the parts into its checkpoint once every worker says its part is written, and checks that
every part is whole and every key is there before the checkpoint counts (docs/multi-worker.md,
"The checkpoint of a sharded bank"). No process reads or writes another's rows.

TensorFlow's bundle writer writes a part's index last, once its data is written whole, so a
part with an index is whole; a worker stopped while writing leaves none."""

import glob
import os
import shutil
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from llp_tf.core.bank_slices import SlicedState
from llp_tf.training.run_directory import checkpoint_files

PARTS_SUFFIX = ".parts"


def sliced_states(items: Mapping[str, Any]) -> dict[str, SlicedState]:
    """Checkpoint key -> state of every `SlicedState` attribute of the checkpoint's ``items``
    (name -> trackable), e.g. ``"bank/embeddings/.ATTRIBUTES/VARIABLE_VALUE"``."""
    return {f"{name}/{attribute}/.ATTRIBUTES/VARIABLE_VALUE": value
            for name, item in items.items() if isinstance(item, tf.Module)
            for attribute, value in vars(item).items() if isinstance(value, SlicedState)}


def parts_dir(checkpoint_prefix: str) -> str:
    """The folder of the workers' parts of the checkpoint ``checkpoint_prefix``."""
    return checkpoint_prefix + PARTS_SUFFIX


def part_prefix(checkpoint_prefix: str, worker: int) -> str:
    """Where worker ``worker`` writes its part of the checkpoint ``checkpoint_prefix``."""
    return os.path.join(parts_dir(checkpoint_prefix), f"worker-{worker}")


def remove(prefix: str) -> None:
    """Deletes the files of the checkpoint ``prefix``, if any."""
    for name in checkpoint_files(prefix):
        os.remove(name)


def write_part(prefix: str, states: Mapping[str, SlicedState]) -> None:
    """Writes this process's slices of ``states`` (key -> state) as the checkpoint ``prefix``,
    each part's tensor read from its device as it is written."""
    names, specs, reads = [], [], []
    for key, state in states.items():
        for spec, read in state.saved_slices():
            names.append(key)
            specs.append(spec)
            reads.append(read)
    remove(prefix)
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    with tf.device("CPU:0"):
        tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=specs,
                          tensors=[read() for read in reads])


def move_into_parts(checkpoint_prefix: str, worker: int) -> None:
    """Moves the checkpoint ``checkpoint_prefix`` this worker wrote whole (its dense state and
    its slices) to its part's place."""
    target = part_prefix(checkpoint_prefix, worker)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    remove(target)
    for name in checkpoint_files(checkpoint_prefix):
        os.replace(name, target + name[len(checkpoint_prefix):])


def missing_parts(checkpoint_prefix: str, workers: int) -> list[int]:
    """The workers among ``range(workers)`` whose part of ``checkpoint_prefix`` has no index."""
    return [worker for worker in range(workers)
            if not os.path.exists(part_prefix(checkpoint_prefix, worker) + ".index")]


def merge_parts(checkpoint_prefix: str, workers: int) -> None:
    """Merges the parts of workers ``0 .. workers - 1`` into the checkpoint
    ``checkpoint_prefix``, then deletes every parts' folder beside it (the others are left
    by saves a lost worker stopped)."""
    tf.raw_ops.MergeV2Checkpoints(
        checkpoint_prefixes=[part_prefix(checkpoint_prefix, w) for w in range(workers)],
        destination_prefix=checkpoint_prefix, delete_old_dirs=False)
    for folder in glob.glob(os.path.join(os.path.dirname(checkpoint_prefix),
                                         "*" + PARTS_SUFFIX)):
        shutil.rmtree(folder, ignore_errors=True)


def missing_keys(checkpoint_prefix: str, states: Mapping[str, SlicedState]) -> list[str]:
    """The keys of ``states`` that the checkpoint does not hold at their full shape (its
    index alone is read)."""
    shapes = tf.train.load_checkpoint(checkpoint_prefix).get_variable_to_shape_map()
    return [key for key, state in states.items()
            if shapes.get(key) != list(state.shape.as_list())]
