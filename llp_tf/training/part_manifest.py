"""A worker's vote on its part of a sliced checkpoint (`sliced_checkpoint`): the manifest of
the part, written durably beside it once the part's files are on disk, and the chief's check
of every worker's manifest before it merges.

A manifest (``<part prefix>.manifest.json``) records each file of the part (its bytes and
crc32c) and, for every sliced key, the key's full shape and the rows [start, stop) the part
holds. The part's files are fsynced before the manifest is written; the manifest goes through
a temporary file, fsync and rename, so it exists whole or not at all: a part without one has
not voted. `problems` finds what would make a merge wrong: a missing manifest, a file whose
size or checksum differs (truncated, a flipped byte), and keys whose rows over all parts do
not tile [0, N) exactly once."""

import json
import os
from collections.abc import Iterable, Mapping, Sequence

import google_crc32c

MANIFEST_SUFFIX = ".manifest.json"
#: Bytes read at a time while checksumming, so a part of any size is checked in this much.
READ_CHUNK = 16 << 20

#: Key -> (full shape, rows [(start, stop)] the part holds).
KeyRows = Mapping[str, tuple[Sequence[int], Sequence[tuple[int, int]]]]


def fsync_path(path: str) -> None:
    """Flushes the file or directory ``path`` to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def file_digest(path: str) -> dict[str, int]:
    """``{"bytes": size, "crc32c": checksum}`` of the file ``path``, read `READ_CHUNK` at a
    time."""
    checksum, size = google_crc32c.Checksum(), 0
    with open(path, "rb") as f:
        while chunk := f.read(READ_CHUNK):
            checksum.update(chunk)
            size += len(chunk)
    return {"bytes": size, "crc32c": int.from_bytes(checksum.digest(), "big")}


def manifest_path(part_prefix: str) -> str:
    """Where the manifest of the part ``part_prefix`` is."""
    return part_prefix + MANIFEST_SUFFIX


def write_manifest(part_prefix: str, files: Iterable[str], rows: KeyRows) -> None:
    """fsyncs the part's ``files`` and its folder, then writes its manifest durably."""
    entries = {}
    for path in files:
        fsync_path(path)
        entries[os.path.basename(path)] = file_digest(path)
    manifest = {"files": entries,
                "keys": {key: {"shape": [int(n) for n in shape],
                               "rows": [[int(start), int(stop)] for start, stop in bounds]}
                         for key, (shape, bounds) in rows.items()}}
    folder = os.path.dirname(part_prefix)
    fsync_path(folder)
    temporary = f"{manifest_path(part_prefix)}.tmp-{os.getpid()}"
    with open(temporary, "w") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, manifest_path(part_prefix))
    fsync_path(folder)


def read_manifest(part_prefix: str) -> dict | None:
    """The part's manifest, or None when it has none (or an unreadable one)."""
    try:
        with open(manifest_path(part_prefix)) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def file_problems(part_prefix: str, manifest: Mapping) -> list[str]:
    """What differs between the part's files and its manifest: a file missing, or of other
    bytes or checksum."""
    folder = os.path.dirname(part_prefix)
    problems = []
    for name, want in manifest["files"].items():
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            problems.append(f"{name} is missing")
            continue
        got = file_digest(path)
        if got["bytes"] != want["bytes"]:
            problems.append(f"{name} has {got['bytes']} bytes, its manifest {want['bytes']}")
        elif got["crc32c"] != want["crc32c"]:
            problems.append(f"{name} fails its crc32c")
    return problems


def tiling_problems(manifests: Mapping[int, Mapping],
                    shapes: Mapping[str, Sequence[int]]) -> list[str]:
    """Keys of ``shapes`` (key -> full shape) whose rows over the ``manifests`` (worker ->
    manifest) do not tile [0, N) exactly once, or were recorded at another shape."""
    problems = []
    for key, shape in shapes.items():
        bounds, recorded = [], set()
        for manifest in manifests.values():
            entry = manifest["keys"].get(key)
            if entry is not None:
                recorded.add(tuple(entry["shape"]))
                bounds.extend(tuple(rows) for rows in entry["rows"])
        if recorded - {tuple(shape)}:
            problems.append(f"{key} recorded at shape {sorted(recorded)[0]}, not {list(shape)}")
            continue
        covered = 0
        for start, stop in sorted(bounds):
            if start != covered:
                problems.append(f"{key} rows {'overlap' if start < covered else 'miss'} at "
                                f"{min(start, covered)}")
                break
            covered = stop
        else:
            if covered != shape[0]:
                problems.append(f"{key} rows end at {covered} of {shape[0]}")
    return problems
