"""A checkpoint whose sharded state the workers of a cluster write together: each worker
writes the slices of its own rows (`bank_slices.SlicedState`, in blocks) into a part and votes its
`part_manifest` (files, bytes, crc32c, rows); the chief checks that every manifest holds and
that the rows tile every key before it merges the parts into a temporary folder, fsyncs, and
renames the merged files into place, index last (docs/multi-worker.md, "The checkpoint of a
sharded bank"). Only then does the checkpoint's state record it; files of a save that did
not finish are swept at the next start (`sweep_unrecorded`). No process reads or writes
another's rows."""

import glob
import os
import re
import shutil
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from llp_tf.core import bank_slices
from llp_tf.core.bank import Bank
from llp_tf.core.bank_slices import SlicedState
from llp_tf.training import part_manifest
from llp_tf.training.run_directory import checkpoint_files

PARTS_SUFFIX = ".parts"
MERGING_SUFFIX = ".merging"
#: After a part's prefix: the folder of its blocks before they are merged into it.
BLOCKS_SUFFIX = ".blocks"
#: The names a save of checkpoint S leaves in the checkpoint folder: its files, its parts'
#: and merge's folders, and the folder TensorFlow writes a sharded save in.
_SAVE_NAME = re.compile(r"^(ckpt-\d+)(\.index|\.data-\d+-of-\d+|\.parts|\.merging|_temp)$")


def sliced_states(items: Mapping[str, Any]) -> dict[str, SlicedState]:
    """Checkpoint key -> state of each `Bank.checkpoint_states` of the banks among the
    checkpoint's ``items`` (name -> trackable) that this process holds a part of, not all
    rows (sharded across workers), e.g. ``"bank/embeddings/.ATTRIBUTES/VARIABLE_VALUE"``."""
    return {f"{name}/{field}{bank_slices.VALUE_SUFFIX}": state
            for name, item in items.items()
            if isinstance(item, Bank) and item.held_rows != (0, item.num_examples)
            for field, state in item.checkpoint_states().items()}


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


def _rows(states: Mapping[str, SlicedState]) -> part_manifest.KeyRows:
    return {key: (state.shape.as_list(), state.saved_rows()) for key, state in states.items()}


def write_part(prefix: str, states: Mapping[str, SlicedState]) -> None:
    """Writes this process's slices of ``states`` (key -> state) as the checkpoint ``prefix``,
    in blocks (`bank_slices.save_blocks`, in the folder ``prefix`` then ``.blocks``, merged
    into ``prefix``), then its manifest."""
    remove(prefix)
    blocks = bank_slices.save_blocks(states, prefix + BLOCKS_SUFFIX)
    tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=blocks, destination_prefix=prefix,
                                  delete_old_dirs=True)
    part_manifest.write_manifest(prefix, checkpoint_files(prefix), _rows(states))


def move_into_parts(checkpoint_prefix: str, worker: int,
                    states: Mapping[str, SlicedState]) -> None:
    """Moves the checkpoint ``checkpoint_prefix`` this worker wrote whole (its dense state and
    its slices of ``states``) to its part's place, then writes the part's manifest."""
    target = part_prefix(checkpoint_prefix, worker)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    remove(target)
    for name in checkpoint_files(checkpoint_prefix):
        os.replace(name, target + name[len(checkpoint_prefix):])
    part_manifest.write_manifest(target, checkpoint_files(target), _rows(states))


def missing_parts(checkpoint_prefix: str, workers: int) -> list[int]:
    """The workers among ``range(workers)`` whose part of ``checkpoint_prefix`` has no
    manifest (has not voted)."""
    return [worker for worker in range(workers)
            if part_manifest.read_manifest(part_prefix(checkpoint_prefix, worker)) is None]


def part_problems(checkpoint_prefix: str, workers: int,
                  states: Mapping[str, SlicedState]) -> list[str]:
    """What is wrong with the workers' parts of ``checkpoint_prefix`` before a merge: a part
    without its manifest, files that differ from it, rows of ``states``' keys that do not
    tile them. Empty when the parts can be merged."""
    missing = missing_parts(checkpoint_prefix, workers)
    if missing:
        return [f"no part from worker(s) {', '.join(map(str, missing))}"]
    manifests = {w: part_manifest.read_manifest(part_prefix(checkpoint_prefix, w))
                 for w in range(workers)}
    problems = [f"worker {w}'s part: {problem}" for w, manifest in manifests.items()
                for problem in part_manifest.file_problems(part_prefix(checkpoint_prefix, w),
                                                           manifest)]
    return problems + part_manifest.tiling_problems(
        manifests, {key: state.shape.as_list() for key, state in states.items()})


def merge_parts(checkpoint_prefix: str, workers: int) -> None:
    """Merges the parts of workers ``0 .. workers - 1`` into a temporary folder, fsyncs the
    merged files and renames them to the checkpoint ``checkpoint_prefix``'s names (the index
    last, so a checkpoint with an index is whole), then deletes every parts' folder beside it
    (the others are left by saves a lost worker stopped)."""
    folder = os.path.dirname(checkpoint_prefix)
    merging = checkpoint_prefix + MERGING_SUFFIX
    shutil.rmtree(merging, ignore_errors=True)
    os.makedirs(merging)
    temporary = os.path.join(merging, os.path.basename(checkpoint_prefix))
    tf.raw_ops.MergeV2Checkpoints(
        checkpoint_prefixes=[part_prefix(checkpoint_prefix, w) for w in range(workers)],
        destination_prefix=temporary, delete_old_dirs=False)
    merged = checkpoint_files(temporary)
    for path in merged:
        part_manifest.fsync_path(path)
    publish(merged, folder)
    shutil.rmtree(merging, ignore_errors=True)
    for parts in glob.glob(os.path.join(folder, "*" + PARTS_SUFFIX)):
        shutil.rmtree(parts, ignore_errors=True)


def publish(merged: list[str], folder: str) -> None:
    """Renames the ``merged`` files into ``folder``, data files first and the index last, and
    fsyncs the folder."""
    for path in sorted(merged, key=lambda path: path.endswith(".index")):
        os.replace(path, os.path.join(folder, os.path.basename(path)))
    part_manifest.fsync_path(folder)


def sweep_unrecorded(checkpoint_dir: str, recorded: list[str] | None) -> list[str]:
    """Deletes from ``checkpoint_dir`` the files and folders of saves that ``recorded`` (the
    checkpoint state's paths) does not hold: a save stopped before its checkpoint was
    recorded. Without a state (``recorded`` None) only the folders of unfinished saves go,
    never a checkpoint's files. Returns the names deleted, sorted (folders end in "/")."""
    kept = {os.path.basename(path) for path in recorded or ()}
    swept = []
    for name in sorted(os.listdir(checkpoint_dir)) if os.path.isdir(checkpoint_dir) else []:
        match = _SAVE_NAME.match(name)
        path = os.path.join(checkpoint_dir, name)
        if match is None or match.group(1) in kept or (
                recorded is None and not os.path.isdir(path)):
            continue
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            name += "/"
        else:
            os.remove(path)
        swept.append(name)
    return swept


def missing_keys(checkpoint_prefix: str, states: Mapping[str, SlicedState]) -> list[str]:
    """The keys of ``states`` that the checkpoint does not hold at their full shape (its
    index alone is read)."""
    shapes = tf.train.load_checkpoint(checkpoint_prefix).get_variable_to_shape_map()
    return [key for key, state in states.items()
            if shapes.get(key) != list(state.shape.as_list())]
