"""Scanning TFRecord shards once for their small fields (labels, indices), cached in
``$LLP_TF_CACHE_DIR`` (default ``~/.cache/llp_tf``) under the shards' paths, sizes and times
for sets of at least ``CACHE_MIN_BYTES``. A shard or record that cannot be read raises a
`DataError` naming the shard and record number."""

import concurrent.futures
import hashlib
import json
import os
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from llp_tf.errors import DataError
from llp_tf.tensor_types import Array, StringTensor, Tensor

CACHE_MIN_BYTES = 64 * 1024 * 1024
_SCAN_BATCH = 4096
_SCAN_THREADS = 4


def cache_dir() -> str:
    """str: where scans are cached."""
    return os.environ.get("LLP_TF_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "llp_tf")


def _signature(files, tag):
    digest = hashlib.sha256(tag.encode())
    for path in files:
        stat = os.stat(path)
        digest.update(json.dumps([os.path.abspath(path), stat.st_size, stat.st_mtime_ns]).encode())
    return digest.hexdigest()[:32]


def _locate_bad_record(path, parse_fn):
    """Index of the first record of ``path`` that cannot be read or parsed."""
    position = 0
    try:
        for serialized in tf.data.TFRecordDataset(path):
            parse_fn(tf.expand_dims(serialized, 0))
            position += 1
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError):
        return position
    return None


def _scan_one(path, parse_fn, what):
    parts = []
    count = 0
    try:
        for batch in tf.data.TFRecordDataset(path).batch(_SCAN_BATCH).map(parse_fn):
            batch = {key: value.numpy() for key, value in batch.items()}
            parts.append(batch)
            count += len(next(iter(batch.values())))
    except tf.errors.DataLossError as error:
        raise DataError(
            f"{what}: shard {path} is corrupt or truncated after record {count + 1} "
            f"({error.message.splitlines()[0]}). Rebuild or re-copy this shard.") from None
    except tf.errors.InvalidArgumentError as error:
        bad = _locate_bad_record(path, parse_fn)
        place = f"record {bad}" if bad is not None else f"a record after record {count}"
        raise DataError(
            f"{what}: cannot parse {place} of shard {path}: "
            f"{error.message.splitlines()[0]}. Check that the shard has the expected "
            "format and rebuild it.") from None
    if not parts:
        return None
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


def _as_field(values):
    """int64 for numbers; str (fixed-width unicode, no pickling) for bytes."""
    if values.dtype == object or values.dtype.kind == "S":
        return np.char.decode(values.astype(bytes), "utf-8")
    return values.astype(np.int64)


def scan(files: Sequence[str], parse_fn: Callable[[StringTensor], dict[str, Tensor]],
         keys: tuple[str, ...], what: str, tag: str) -> tuple[Array, dict[str, Array]]:
    """(counts: int64 [S] records per shard, fields: key -> [sum(counts)] int64 or str array)
    of the shards ``files``, in shard order; ``parse_fn`` maps string [B] records to ``keys``
    -> [B] tensors, ``what`` names the dataset and split, ``tag`` identifies ``parse_fn`` in
    the cache."""
    total_bytes = sum(os.path.getsize(path) for path in files)
    cache_path = None
    if files and total_bytes >= CACHE_MIN_BYTES:
        cache_path = os.path.join(cache_dir(), f"scan-{_signature(files, tag)}.npz")
        if os.path.exists(cache_path):
            try:
                with np.load(cache_path, allow_pickle=False) as cached:
                    return cached["counts"], {key: cached[key] for key in keys}
            except (OSError, KeyError, ValueError):
                pass  # An unreadable cache is only a lost shortcut: scan again.

    with concurrent.futures.ThreadPoolExecutor(_SCAN_THREADS) as pool:
        results = list(pool.map(lambda path: _scan_one(path, parse_fn, what), files))
    counts = np.array([0 if r is None else len(r[keys[0]]) for r in results], np.int64)
    fields = {key: _as_field(np.concatenate([r[key] for r in results if r is not None]
                                            or [np.zeros(0, np.int64)]))
              for key in keys}

    if cache_path is not None:
        try:
            os.makedirs(os.path.dirname(cache_path), exist_ok=True)
            temporary = cache_path + f".{os.getpid()}.tmp.npz"
            np.savez(temporary, counts=counts, **fields)
            os.replace(temporary, cache_path)
        except OSError:
            pass  # Caching is an optimisation; a read-only home still works.
    return counts, fields
