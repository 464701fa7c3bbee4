"""Finding every image of a dataset that cannot be decoded, in one parallel pass, with the
source's own decoder (`Source.load_image`): tools/check_data.py checks both splits, a new run
its validation split (`require_decodable`)."""

import dataclasses
from collections.abc import Callable

import numpy as np

from llp_tf.counted_nouns import counted
from llp_tf.data.decoding import decode
from llp_tf.data.sources.base import Source
from llp_tf.data.splits import exclusions
from llp_tf.errors import DataError
from llp_tf.tensor_types import Array
from llp_tf.tool_names import tool

#: Records checked between two progress reports.
BATCH = 256
_SHOWN = 3


@dataclasses.dataclass(frozen=True)
class BadImage:
    """An example whose image cannot be read or decoded: its ``split``, ``index`` (int) and
    ``where`` (str, its file or shard and record)."""

    split: str
    index: int
    where: str


def find_bad_images(source: Source, split: str, skip: Array | None = None,
                    on_progress: Callable[[int, int], object] | None = None) -> list[BadImage]:
    """list of `BadImage`, sorted by index: the examples of ``split`` whose image cannot be
    read or decoded, leaving out ``skip`` (int [K]); ``on_progress(checked, bad)`` is called
    after every `BATCH` images."""
    records = exclusions.drop_excluded(source.records(split),
                                       source.info.num_examples(split), skip)
    checked = decode.decodable(records, source.load_image).map(
        lambda r, ok: {"index": r["index"], "ok": ok, "where": source.describe(split, r)})
    bad, done = [], 0
    for batch in checked.batch(BATCH).prefetch(2).as_numpy_iterator():
        for position in np.flatnonzero(~batch["ok"]):
            bad.append(BadImage(split, int(batch["index"][position]),
                                batch["where"][position].decode()))
        done += batch["ok"].size
        if on_progress is not None:
            on_progress(done, len(bad))
    return sorted(bad, key=lambda b: b.index)


def require_decodable(source: Source, split: str, skip: Array | None = None) -> None:
    """Raises DataError naming the first images of ``split`` that cannot be decoded, and what
    to do; a split without examples or a source with ``trusted_bytes`` passes unread."""
    if source.trusted_bytes or source.info.num_examples(split) == 0:
        return
    bad = find_bad_images(source, split, skip)
    if bad:
        shown = "; ".join(f"{b.where} ({split} example {b.index})" for b in bad[:_SHOWN])
        raise DataError(
            f"{counted(len(bad), split + ' image')} of {source.info.name} cannot be read or "
            f"decoded (first: {shown}). {source.repair}; or leave them out: {tool('check_data')} "
            f"--dataset={source.info.name} --write_exclude_list=FILE finds every bad image, "
            "and --exclude_list=FILE leaves them out.")
