"""TensorFlow Datasets image-classification datasets: ``tfds:name[/config][:version]``.

Any dataset with one image feature and one class label, stored as TFRecord shards (TFDS's
default), prepared first if needed, as ``tfds.load`` does. Before a download each host in the
checksum list must take a connection within seconds, so that an offline machine fails at once.
The validation split is "validation", else "test", else none; an example's index is the number
of examples in the shards before its own plus its position in its shard."""

import os
import socket
from collections.abc import Iterable
import urllib.parse
import urllib.request

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from llp_tf.data.sources import shards
from llp_tf.data.sources.base import (NAME_FORMS, SPLITS, TRAIN, VALIDATION, ShardFileSource,
                                SourceInfo, validate_labels)
from llp_tf.errors import DataError
from llp_tf.tensor_types import Array, IntTensor

_VALIDATION_SPLITS = ("validation", "test")

REACHABILITY_TIMEOUT_SECONDS = 5.0


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _one_paragraph(text):
    """``text`` with its line breaks and runs of spaces folded into single spaces."""
    return " ".join(str(text).split())


def builder_by_name(name: str,
                    data_dir: str | None = None) -> tfds.core.DatasetBuilder:
    """tfds.core.DatasetBuilder for ``name``; DataError if TFDS has no such dataset."""
    try:
        return tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError:
        raise DataError(
            f"TFDS has no dataset named {name!r} (see `tfds.list_builders()` or the TFDS "
            f"catalog for names). Dataset names have the forms {NAME_FORMS}.") from None
    except (ValueError, AssertionError) as error:
        raise DataError(f"TFDS cannot open dataset {name!r}: {_first_line(error)}") from None


def url_hosts(urls: Iterable[str]) -> list[tuple[str, int]]:
    """Sorted (host, port) pairs of the http(s) URLs in ``urls``."""
    hosts = set()
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme in ("http", "https") and parts.hostname:
            hosts.add((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)))
    return sorted(hosts)


def download_hosts(builder: tfds.core.DatasetBuilder) -> list[tuple[str, int]]:
    """Sorted (host, port) pairs of the URLs in ``builder``'s checksum list."""
    return url_hosts(builder.url_infos or {})


def unreachable_host(urls: Iterable[str], timeout: float = REACHABILITY_TIMEOUT_SECONDS
                     ) -> tuple[str, OSError] | None:
    """(host, OSError) of the first host of ``urls`` that takes no connection, or None (always
    behind a proxy, which TFDS's downloads would use)."""
    if urllib.request.getproxies():
        return None
    for host, port in url_hosts(urls):
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError as error:
            return host, error
    return None


def check_download_hosts(builder: tfds.core.DatasetBuilder,
                         timeout: float = REACHABILITY_TIMEOUT_SECONDS) -> None:
    """DataError unless every host ``builder`` downloads from takes a connection."""
    failure = unreachable_host(builder.url_infos or {}, timeout)
    if failure:
        host, error = failure
        raise DataError(
            f"TFDS dataset {builder.name!r} is not prepared in {builder.data_dir_root}, and "
            f"preparing it downloads from {host}, which cannot be reached from this "
            f"machine ({error}). Prepare it where there is internet access and pass that "
            "data_dir (or copy the prepared folder into this one).")


def check_manual_download(builder: tfds.core.DatasetBuilder, manual_dir: str) -> None:
    """DataError with TFDS's whole instruction (imagenet2012's archives) if ``manual_dir``
    holds nothing."""
    if os.path.isdir(manual_dir) and any(not name.startswith(".")
                                         for name in os.listdir(manual_dir)):
        return
    state = "is empty" if os.path.isdir(manual_dir) else "does not exist"
    raise DataError(
        f"TFDS dataset {builder.name!r} is not prepared in {builder.data_dir_root} and must be "
        f"prepared from a manual download, but its manual folder {manual_dir} {state}. "
        f"TFDS's instructions: {_one_paragraph(builder.MANUAL_DOWNLOAD_INSTRUCTIONS)} Put "
        f"the files in {manual_dir} and rerun: TFDS prepares the dataset from them once.")


def prepare(builder: tfds.core.DatasetBuilder) -> None:
    """Prepares ``builder``'s data in its data_dir if it is not there yet."""
    if builder.is_prepared():
        return
    manual_dir = os.path.join(builder.data_dir_root, "downloads", "manual")
    if builder.MANUAL_DOWNLOAD_INSTRUCTIONS:
        check_manual_download(builder, manual_dir)
    else:
        check_download_hosts(builder)
    try:
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
            manual_dir=manual_dir, try_download_gcs=False))
    except DataError:
        raise
    except Exception as error:  # noqa: BLE001 -- any failure of TFDS, reported in one paragraph
        raise DataError(
            f"TFDS could not prepare dataset {builder.name!r} in {builder.data_dir_root}: "
            f"{_one_paragraph(error) or type(error).__name__} Datasets that need a manual download (imagenet2012) "
            f"expect their archives in {manual_dir}; others are downloaded, which needs "
            "internet access. Prepare it where that works and pass its data_dir.") from None


def _pick_features(builder):
    """(image_key, label_key) of an image-classification dataset."""
    features = builder.info.features
    keys = builder.info.supervised_keys
    if (isinstance(keys, tuple) and len(keys) == 2 and all(isinstance(k, str) for k in keys)
            and isinstance(features[keys[0]], tfds.features.Image)
            and isinstance(features[keys[1]], tfds.features.ClassLabel)):
        return keys
    images = [k for k, f in features.items() if isinstance(f, tfds.features.Image)]
    labels = [k for k, f in features.items() if isinstance(f, tfds.features.ClassLabel)]
    if len(images) != 1 or len(labels) != 1:
        raise DataError(
            f"TFDS dataset {builder.name!r} is not an image-classification dataset: it needs "
            f"exactly one Image and one ClassLabel feature, and has {features}.")
    return images[0], labels[0]


class TFDSSource(ShardFileSource):
    """A prepared TFDS dataset."""

    # TFDS decoded or encoded each image when it prepared the data.
    trusted_bytes = True

    def __init__(self, builder: tfds.core.DatasetBuilder, name: str | None = None) -> None:
        name = name or f"tfds:{builder.name}"
        if str(builder.info.file_format) not in ("tfrecord", "FileFormat.TFRECORD"):
            raise DataError(
                f"TFDS dataset {builder.name!r} in {builder.data_dir} is stored as "
                f"{builder.info.file_format}; only TFRecord shards are read. Prepare it again "
                "with file_format='tfrecord' (TFDS's default).")
        self._image_key, self._label_key = _pick_features(builder)
        self._builder = builder
        available = builder.info.splits
        split_names = {TRAIN: TRAIN if TRAIN in available else None,
                       VALIDATION: next((s for s in _VALIDATION_SPLITS if s in available), None)}
        if split_names[TRAIN] is None:
            raise DataError(f"TFDS dataset {builder.name!r} has no 'train' split "
                            f"(it has {', '.join(available) or 'none'}).")
        self._files, self._offsets, labels_by_index = {}, {}, {}
        label_feature = builder.info.features[self._label_key]
        num_classes = label_feature.num_classes
        for split in SPLITS:
            files, counts, labels = [], np.zeros(0, np.int64), np.zeros(0, np.int64)
            if split_names[split] is not None:
                info = available[split_names[split]]
                files = [os.fspath(p) for p in info.filepaths]
                counts, labels = self._scan(files, f"TFDS {name} {split_names[split]} split")
                expected = np.asarray(info.shard_lengths, np.int64)
                if not np.array_equal(counts, expected):
                    raise DataError(
                        f"TFDS {name} {split_names[split]} split in {builder.data_dir}: the "
                        f"shards hold {counts.tolist()} records, its metadata says "
                        f"{expected.tolist()}. The prepared files are incomplete or changed; "
                        "prepare the dataset again.")
            self._files[split] = files
            self._offsets[split] = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
            validate_labels(labels, num_classes, f"TFDS {name} {split} split",
                            lambda i, split=split: self._where(split, i))
            labels_by_index[split] = labels
        if labels_by_index[TRAIN].size == 0:
            raise DataError(f"TFDS dataset {name} has an empty train split.")
        self._labels = labels_by_index
        shape = builder.info.features[self._image_key].shape
        image_size = tuple(int(d) for d in shape[:2]) if None not in shape[:2] else None
        super().__init__(SourceInfo(
            name=name, num_classes=int(num_classes), class_names=tuple(label_feature.names),
            num_train=int(labels_by_index[TRAIN].size),
            num_validation=int(labels_by_index[VALIDATION].size),
            image_size=image_size, channels=int(shape[2] or 3)))

    def _scan(self, files, what):
        spec = {self._label_key: tf.io.FixedLenFeature([], tf.int64)}
        label_key = self._label_key

        def parse(serialized):
            return {"label": tf.io.parse_example(serialized, spec)[label_key]}

        counts, fields = shards.scan(files, parse, ("label",), what, tag=f"tfds-label-{label_key}")
        return counts, fields["label"]

    def file_names(self, split: str) -> Array:
        """The ``file_name`` (or ``filename``) text feature by index, scanned once (cached)."""
        self.info.num_examples(split)
        features = self._builder.info.features
        key = next((k for k in ("file_name", "filename")
                    if k in features and isinstance(features[k], tfds.features.Text)), None)
        if key is None:
            return super().file_names(split)
        spec = {key: tf.io.FixedLenFeature([], tf.string)}

        def parse(serialized):
            return {"file_name": tf.io.parse_example(serialized, spec)[key]}

        _, fields = shards.scan(self._files[split], parse, ("file_name",),
                                f"TFDS {self.info.name} {split} split", tag=f"tfds-text-{key}")
        return np.array([os.path.basename(name) for name in fields["file_name"]], dtype=str)

    def _where(self, split, index):
        offsets = self._offsets[split]
        shard = int(np.searchsorted(offsets, index, side="right")) - 1
        return f"shard {self._files[split][shard]}, record {index - int(offsets[shard])}"

    @property
    def builder(self) -> tfds.core.DatasetBuilder:
        """The tfds.core.DatasetBuilder read."""
        return self._builder

    def read_shard(self, split: str, shard: IntTensor) -> tf.data.Dataset:
        files = tf.constant(self._files[split] or [""], tf.string)
        offsets = tf.constant(self._offsets[split] if len(self._offsets[split]) else [0], tf.int64)
        spec = {self._image_key: tf.io.FixedLenFeature([], tf.string),
                self._label_key: tf.io.FixedLenFeature([], tf.int64)}
        image_key, label_key = self._image_key, self._label_key

        def parse(position, serialized):
            parsed = tf.io.parse_single_example(serialized, spec)
            return {"data": parsed[image_key], "label": parsed[label_key],
                    "index": tf.gather(offsets, shard) + position,
                    "shard": shard, "position": position}

        return tf.data.TFRecordDataset(tf.gather(files, shard)).enumerate().map(parse)



def load(name: str, data_dir: str | None = None) -> TFDSSource:
    """TFDSSource for TFDS dataset ``name``, prepared in ``data_dir`` if needed."""
    builder = builder_by_name(name, data_dir)
    prepare(builder)
    return TFDSSource(builder)
