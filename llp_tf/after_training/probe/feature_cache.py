"""The probe's feature cache: a folder of ``features.npy`` float32 [N, F] (row j: example
``index[j]``, written a batch at a time), ``labels.npy`` and ``index.npy`` int64 [N], and
``manifest.json`` (weights hash, dataset, split, image size, examples). Built in
``<folder>.partial`` under a lock on ``<folder>.lock`` and renamed when complete; reused
only when its manifest matches the request, and only a cache is ever replaced."""

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import time
from typing import Any, TextIO

import numpy as np

from llp_tf.after_training.features import DEFAULT_BATCH_SIZE, FeatureSet, output_batches
from llp_tf.after_training.probe.npy_rows import NpyRows, NpyRowWriter
from llp_tf.counted_nouns import counted, listed
from llp_tf.data.sources.base import Source, SourceInfo
from llp_tf.errors import ConfigError, DataError
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.tensor_types import Array

FEATURES_FILE = "features.npy"
LABELS_FILE = "labels.npy"
INDEX_FILE = "index.npy"
MANIFEST_FILE = "manifest.json"
CACHE_FILES = (FEATURES_FILE, LABELS_FILE, INDEX_FILE, MANIFEST_FILE)
LOCK_SUFFIX = ".lock"
#: Raise it when the files' layout or meaning changes.
CACHE_VERSION = 2
#: Dataset name forms whose part after the colon is a path (`registry.load_source`).
_PATH_KINDS = ("folder", "tfrecord", "places205", "list")
#: Manifest entries that must equal the request for a cache to be reused.
MATCHED = ("version", "weights_sha256", "dataset", "split", "image_size",
           "num_split_examples", "num_rows", "index_sha256")


def weights_fingerprint(model: EmbeddingClassifier) -> str:
    """SHA-256 of every variable of ``model`` (names, shapes and values)."""
    digest = hashlib.sha256()
    for variable in model.weights:
        value = np.ascontiguousarray(variable.numpy())
        digest.update(f"{variable.path}:{value.dtype}:{value.shape};".encode())
        digest.update(memoryview(value).cast("B"))
    return digest.hexdigest()


def dataset_identity(info: SourceInfo) -> dict[str, Any]:
    """What tells two datasets apart: the name with its path made absolute, the split sizes
    and a SHA-256 of the class names (JSON-ready dict)."""
    kind, _, rest = info.name.partition(":")
    name = info.name
    if kind in _PATH_KINDS and rest:
        path, query_mark, query = rest.partition("?")
        name = f"{kind}:{os.path.abspath(path)}{query_mark}{query}"
    return {"name": name, "num_train": int(info.num_train),
            "num_validation": int(info.num_validation),
            "class_names_sha256": hashlib.sha256(
                json.dumps(list(info.class_names)).encode()).hexdigest()}


def cache_request(model: EmbeddingClassifier, source: Source, split: str, image_size: int,
                  index: Array | None = None, trunk: str = "") -> dict[str, Any]:
    """The manifest a cache of these features must have (``index``: sorted int64 [M] or all;
    ``trunk`` names the trunk in messages)."""
    count = source.info.num_examples(split)
    selected = np.arange(count, dtype=np.int64) if index is None else np.asarray(index, np.int64)
    return {"version": CACHE_VERSION, "weights_sha256": weights_fingerprint(model),
            "dataset": dataset_identity(source.info), "split": split, "image_size": int(image_size),
            "num_split_examples": int(count), "num_rows": int(len(selected)),
            "index_sha256": hashlib.sha256(selected.tobytes()).hexdigest(), "trunk": trunk}


@dataclasses.dataclass
class FeatureCache:
    """An opened cache: ``features`` `NpyRows` float32 [N, F] read on demand, ``labels`` and
    ``index`` int64 [N]; ``reused``: it existed before this call."""

    directory: str
    manifest: dict[str, Any]
    features: NpyRows
    labels: Array
    index: Array
    reused: bool

    def feature_set(self) -> FeatureSet:
        """`FeatureSet` of this cache's rows."""
        return FeatureSet(self.features, self.labels, self.index)


def _read_manifest(directory):
    try:
        with open(os.path.join(directory, MANIFEST_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{directory} is not a complete feature cache ({error}); move it "
                          "away or give another --cache_dir.") from None


def _mismatches(manifest, request):
    return [f"{key} {manifest.get(key)!r} instead of {request[key]!r}"
            for key in MATCHED if manifest.get(key) != request[key]]


def open_cache(directory: str, request: dict[str, Any]) -> FeatureCache:
    """Opens the cache in ``directory`` whose manifest matches ``request``.

    Raises:
      ConfigError: it was made from other weights, data or settings.
      DataError: its files are missing or inconsistent.
    """
    manifest = _read_manifest(directory)
    problems = _mismatches(manifest, request)
    if problems:
        made_by, now = manifest.get("trunk") or "another trunk", request["trunk"] or "this trunk"
        trunks = f" (it was made by {made_by}; now: {now})" if made_by != now else ""
        raise ConfigError(
            f"The feature cache {directory} does not hold the features asked for{trunks}: "
            + "; ".join(problems) + ". Give another --cache_dir, or rebuild it with "
            "--noreuse_cache.")
    try:
        features = NpyRows(os.path.join(directory, FEATURES_FILE))
        labels = np.load(os.path.join(directory, LABELS_FILE))
        index = np.load(os.path.join(directory, INDEX_FILE))
    except OSError as error:
        raise DataError(f"The feature cache {directory} is damaged ({error}); rebuild it with "
                        "--noreuse_cache.") from None
    expected = (request["num_rows"], manifest.get("feature_dim"))
    if features.shape != expected or labels.shape != index.shape or \
            len(labels) != request["num_rows"]:
        raise DataError(f"The feature cache {directory} is damaged: its files have shapes "
                        f"{features.shape}, {labels.shape}, {index.shape}, not {expected}; "
                        "rebuild it with --noreuse_cache.")
    return FeatureCache(directory, manifest, features, labels, index, reused=True)


def _fill(writer_path, model, source, split, image_size, index, batch_size, stream):
    """(labels int64 [N], index int64 [N], F) of the features written to ``writer_path``."""
    selected = (np.arange(source.info.num_examples(split), dtype=np.int64) if index is None
                else np.asarray(index, np.int64))
    labels, written, writer = np.zeros(len(selected), np.int64), 0, None
    try:
        for batch_index, batch_labels, values in output_batches(
                model, source, split, image_size, batch_size, index, "features", stream):
            if not np.isfinite(values).all():
                raise ConfigError(f"The trunk's features of {source.info.name} {split} contain "
                                  "NaN or infinite values; the checkpoint is broken or diverged.")
            if writer is None:
                writer = NpyRowWriter(writer_path, len(selected), values.shape[1])
            rows = np.searchsorted(selected, batch_index)
            writer.write(rows, values)
            labels[rows] = batch_labels
            written += len(rows)
    finally:
        if writer is not None:
            writer.close()
    if written != len(selected):
        raise DataError(f"{source.info.name} {split} gave {counted(written, 'example')} of the "
                        f"{len(selected)} expected; the dataset changed while being read.")
    return labels, selected, writer.shape[1]


def _check_replaceable(folder, marker):
    """ConfigError unless ``folder`` is absent, empty, or holds `CACHE_FILES` alone, with
    ``marker`` among them (if not None)."""
    if not os.path.lexists(folder):
        return
    names = None if os.path.islink(folder) or not os.path.isdir(folder) else \
        sorted(os.listdir(folder))
    if names is not None and set(names) <= set(CACHE_FILES) and (
            marker is None or not names or marker in names):
        return
    other = sorted(set(names or ()) - set(CACHE_FILES))
    held = ("is not a directory" if names is None else
            f"holds {listed(other)}, which a feature cache does not" if other else
            f"holds no {marker}")
    raise ConfigError(f"{folder} {held}, so the probe does not replace it: move it away or "
                      "give another --cache_dir.")


def build_cache(model: EmbeddingClassifier, source: Source, split: str, image_size: int, directory: str,
                request: dict[str, Any], index: Array | None = None,
                batch_size: int = DEFAULT_BATCH_SIZE,
                stream: TextIO | None = None) -> FeatureCache:
    """Computes a split's features into a new cache in ``directory`` with the manifest
    ``request`` (`cache_request`), replacing a cache there, atomically.

    Raises:
      ConfigError: ``directory`` or its partial folder holds other files (before any work).
    """
    partial = directory.rstrip(os.sep) + ".partial"
    _check_replaceable(directory, MANIFEST_FILE)
    _check_replaceable(partial, None)
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    start = time.monotonic()
    labels, selected, feature_dim = _fill(os.path.join(partial, FEATURES_FILE), model, source, split,
                             image_size, index, batch_size, stream)
    np.save(os.path.join(partial, LABELS_FILE), labels)
    np.save(os.path.join(partial, INDEX_FILE), selected)
    manifest = dict(request, feature_dim=int(feature_dim), dtype="float32",
                    seconds=time.monotonic() - start, created=time.strftime("%Y-%m-%d %H:%M:%S"))
    with open(os.path.join(partial, MANIFEST_FILE), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    _check_replaceable(directory, MANIFEST_FILE)
    if os.path.exists(directory):
        shutil.rmtree(directory)
    os.rename(partial, directory)
    cache = open_cache(directory, request)
    cache.reused = False
    return cache


def cached_features(model: EmbeddingClassifier, source: Source, split: str, image_size: int,
                    directory: str, index: Array | None = None,
                    batch_size: int = DEFAULT_BATCH_SIZE, reuse: bool = True, trunk: str = "",
                    stream: TextIO | None = None) -> FeatureCache:
    """The cache of a split's features in ``directory``: the existing one if ``reuse``
    (ConfigError when it holds other features), else a new one (`build_cache`)."""
    request = cache_request(model, source, split, image_size, index, trunk)
    if reuse and os.path.isdir(directory):
        return open_cache(directory, request)
    with _build_lock(directory):
        return build_cache(model, source, split, image_size, directory, request, index,
                           batch_size, stream)


@contextlib.contextmanager
def _build_lock(directory):
    """An advisory ``flock`` on ``<directory>.lock`` while this process builds the cache:
    a second build fails at once instead of deleting the first one's partial cache."""
    path = directory.rstrip(os.sep) + LOCK_SUFFIX
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(f"Another process is building the feature cache {directory} "
                              f"(it holds {path}). Wait for it to finish, then run again to "
                              "reuse its cache, or give another --cache_dir.") from None
        # A holder that ended between our open and our lock removed the file: retry.
        if os.path.exists(path) and os.fstat(fd).st_ino == os.stat(path).st_ino:
            break
        os.close(fd)
    try:
        yield
    finally:
        os.unlink(path)
        os.close(fd)
