"""Exclude lists: examples a run never draws, and the record a run keeps of them.

An excluded example keeps its index but is neither labelled, used nor evaluated. A line names
one example: ``train 17`` or ``validation 4`` (a ``#`` comment may follow), or an image file of
a folder:, list: or places205: source; blank and ``#`` lines are skipped. A run records the
list and the excluded indices in its ``split.npz`` and resumes only with the same ones
(`check_resume`)."""

import dataclasses
import os
import re
from collections.abc import Iterable

import numpy as np
import tensorflow as tf

from llp_tf.data.sources.base import SPLITS, TRAIN, VALIDATION, FileSource, Source
from llp_tf.data.splits import regime
from llp_tf.errors import DataError
from llp_tf.tensor_types import Array
from llp_tf.tool_names import tool

_BY_INDEX = re.compile(rf"^({'|'.join(SPLITS)})\s+(\d+)\s*(#.*)?$")


@dataclasses.dataclass(frozen=True)
class Exclusions:
    """The examples a run leaves out: ``train`` and ``validation``, sorted distinct int64 [E],
    and the list's ``path`` and ``sha256`` (None without a list)."""

    train: Array
    validation: Array
    path: str | None = None
    sha256: str | None = None

    def of(self, split: str) -> Array:
        """int64 [E]: the excluded indices of ``split``."""
        return self.train if split == TRAIN else self.validation

    def record(self) -> dict | None:
        """What a run records of the list (JSON), or None without one."""
        if self.path is None:
            return None
        return {"path": self.path, "sha256": self.sha256, TRAIN: int(self.train.size),
                VALIDATION: int(self.validation.size)}


def none() -> Exclusions:
    """Exclusions of a run without an exclude list."""
    return Exclusions(np.zeros(0, np.int64), np.zeros(0, np.int64))


def _file_indices(source):
    if not isinstance(source, FileSource):
        return {}
    return {os.path.normpath(path): (split, index) for split in SPLITS
            if source.info.num_examples(split)
            for index, path in enumerate(source.paths(split))}


def _parse(path, lines, source):
    """(split, index) of each line of the list at ``path``."""
    by_file = None
    for number, line in lines:
        match = _BY_INDEX.match(line)
        if match:
            split, index = match.group(1), int(match.group(2))
            if index >= source.info.num_examples(split):
                raise DataError(
                    f"Exclude list {path}, line {number}: {split} example {index} does not "
                    f"exist; {source.info.name} has {source.info.num_examples(split)} {split} "
                    "examples. The list was made for another dataset.")
            yield split, index
            continue
        by_file = _file_indices(source) if by_file is None else by_file
        found = by_file.get(os.path.normpath(os.path.expanduser(line)))
        if found is None:
            raise DataError(
                f"Exclude list {path}, line {number}: {line[:200]!r} is neither 'train <index>' "
                f"or 'validation <index>' nor an image file of {source.info.name}. "
                f"{tool('check_data')} --write_exclude_list writes such a list.")
        yield found


def read_exclude_list(path: str, source: Source) -> Exclusions:
    """`Exclusions` of ``source`` named by the list ``path``; DataError for an unreadable list
    or a line naming no example."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = [(number, line.strip()) for number, line in enumerate(f, 1)]
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise DataError(f"Cannot read the exclude list {path}: {reason}.") from None
    lines = [(number, line) for number, line in lines if line and not line.startswith("#")]
    named = {split: set() for split in SPLITS}
    for split, index in _parse(path, lines, source):
        named[split].add(index)
    return Exclusions(*(np.array(sorted(named[split]), np.int64) for split in SPLITS),
                      path=os.path.abspath(path), sha256=regime.file_sha256(path))


def load(path: str | None, source: Source) -> Exclusions:
    """`read_exclude_list`, or `none` when ``path`` is None or empty."""
    return read_exclude_list(path, source) if path else none()


def drop_excluded(records: tf.data.Dataset, num_examples: int,
                  excluded_index: Array | None) -> tf.data.Dataset:
    """``records`` of a split of ``num_examples`` without those whose ``index`` is in
    ``excluded_index`` (sorted distinct int [E], or None)."""
    if excluded_index is None or not len(excluded_index):
        return records
    keep = np.ones(num_examples, bool)
    keep[regime.check_index_set("excluded_index", excluded_index, num_examples)] = False
    table = tf.constant(keep)
    return records.filter(lambda r: tf.gather(table, r["index"]))


#: The end of the first line of an exclude list `format_exclude_list` writes.
_WRITTEN_BY = "be read or decoded (tools/check_data.py)."


def format_exclude_list(examples: Iterable[tuple[str, int, str]], dataset_name: str) -> str:
    """The text of an exclude list of ``examples`` ((split, index, where) each): one ``split
    index # where`` line each."""
    lines = [f"# Examples of {dataset_name} left out by --exclude_list: their images cannot "
             + _WRITTEN_BY]
    lines += [f"{split} {index}  # {where}" for split, index, where in examples]
    return "\n".join(lines) + "\n"


def is_written_list(path: str) -> bool:
    """Whether ``path`` is an exclude list `format_exclude_list` wrote (by its first line), not
    one written by hand."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline().rstrip("\n")
    except (OSError, UnicodeDecodeError):
        return False
    return first.startswith("# Examples of ") and first.endswith(_WRITTEN_BY)


def check_resume(split_path: str, current: Exclusions) -> None:
    """Raises DataError unless the run whose split file is ``split_path`` excluded exactly the
    examples of ``current``."""
    recorded = regime.read_made_from(split_path)["exclude_list"]
    excluded = regime.read_split_exclusions(split_path)
    if all(np.array_equal(excluded[split], current.of(split)) for split in SPLITS):
        return
    started = ("without an exclude list" if recorded is None else
               f"excluding {recorded[TRAIN]} training and {recorded[VALIDATION]} validation "
               f"examples (the list {recorded['path']}, SHA-256 {recorded['sha256']})")
    now = ("none" if current.path is None else
           f"{current.train.size} training and {current.validation.size} validation "
           f"examples (the list {current.path}, SHA-256 {current.sha256})")
    raise DataError(
        f"The run whose split is {split_path} was started {started}; --exclude_list now "
        f"excludes {now}. A run keeps the examples it started with, or its split and memory "
        "bank no longer match: resume with the list it started with (its excluded examples "
        "are recorded in its split.npz), or start a new run with the new list.")
