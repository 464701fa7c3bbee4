"""TFRecord folders in the format of the authors' release.

Shards ``train-00000-of-01024`` ... and ``validation-...`` of uncompressed ``tf.train.Example``
records: ``images`` (bytes, the encoded image), ``labels`` (int64 in [0, C)) and ``index``
(int64; a split's indices are exactly 0..N-1). An optional ``dataset_info.json``
(tools/build_tfrecords.py writes it) names the classes; without it they are 0..max label, each
with a training example (`base.check_inferred_classes`). Opening a folder scans and checks
every label and index once (`shards`)."""

import glob
import json
import os

import numpy as np
import tensorflow as tf

from llp_tf.counted_nouns import counted
from llp_tf.data.sources import shards
from llp_tf.data.sources.base import (SPLITS, TRAIN, VALIDATION, ShardFileSource, SourceInfo,
                                check_inferred_classes, validate_labels)
from llp_tf.errors import DataError
from llp_tf.tensor_types import IntTensor
from llp_tf.tool_names import tool

IMAGE_FEATURE = "images"
LABEL_FEATURE = "labels"
INDEX_FEATURE = "index"
INFO_FILE = "dataset_info.json"


def shard_name(split: str, shard: int, num_shards: int) -> str:
    """File name of a shard, as the release names them."""
    return f"{split}-{shard:05d}-of-{num_shards:05d}"


def serialize_example(encoded_image: bytes, label: int, index: int) -> bytes:
    """bytes: one record of the format (``encoded_image`` bytes, ints)."""
    feature = {
        IMAGE_FEATURE: tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded_image])),
        LABEL_FEATURE: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
        INDEX_FEATURE: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(index)])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def list_shards(folder: str, split: str) -> list[str]:
    """Sorted paths of ``split``'s shards in ``folder`` (files named ``split-*``)."""
    return sorted(path for path in glob.glob(os.path.join(glob.escape(folder), f"{split}-*"))
                  if os.path.isfile(path))


_SMALL_FIELDS = {
    LABEL_FEATURE: tf.io.FixedLenFeature([], tf.int64),
    INDEX_FEATURE: tf.io.FixedLenFeature([], tf.int64),
}
_ALL_FIELDS = dict(_SMALL_FIELDS, **{IMAGE_FEATURE: tf.io.FixedLenFeature([], tf.string)})


def _parse_small_fields(serialized):
    parsed = tf.io.parse_example(serialized, _SMALL_FIELDS)
    return {"label": parsed[LABEL_FEATURE], "index": parsed[INDEX_FEATURE]}


def _read_info(folder):
    path = os.path.join(folder, INFO_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            info = json.load(f)
        names = info["class_names"]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ValueError("class_names must be a non-empty list of strings")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DataError(
            f"{path} is not a valid dataset description ({error}); it must be JSON with a "
            "'class_names' list. Fix it, or delete it to name classes by number.") from None
    return tuple(names)


class TFRecordSource(ShardFileSource):
    """A folder of ``train-*`` / ``validation-*`` shards."""

    def __init__(self, folder: str) -> None:
        folder = os.path.abspath(os.path.expanduser(folder))
        name = f"tfrecord:{folder}"
        if not os.path.isdir(folder):
            raise DataError(
                f"TFRecord folder {folder} does not exist or is not a folder. Give the folder "
                f"that holds the train-* and validation-* shards ({tool('build_tfrecords')} "
                "writes one from an image folder).")
        self._files = {split: list_shards(folder, split) for split in SPLITS}
        if not self._files[TRAIN]:
            raise DataError(
                f"TFRecord folder {folder} has no train-* shards. Expected files named like "
                "train-00000-of-01024 with features images/labels/index; "
                f"{tool('build_tfrecords')} writes them from an image folder.")

        self._counts = {}     # split -> records per shard
        self._positions = {}  # split -> storage position of each index
        labels_by_index = {}
        for split in SPLITS:
            labels_by_index[split] = self._scan_split(folder, split)
        if labels_by_index[TRAIN].size == 0:
            raise DataError(f"TFRecord folder {folder}: the train-* shards hold no records; "
                            "the dataset is empty.")

        class_names = _read_info(folder)
        if class_names is None:
            train_labels = labels_by_index[TRAIN]
            check_inferred_classes(
                train_labels, f"TFRecord train split of {folder}",
                lambda i: self._where(TRAIN, i),
                f'name them in {os.path.join(folder, INFO_FILE)} ({{"class_names": [...]}})')
            class_names = tuple(str(c) for c in range(max(int(train_labels.max()), 0) + 1))
        for split in SPLITS:
            validate_labels(labels_by_index[split], len(class_names),
                            f"TFRecord {split} split of {folder}",
                            lambda i, split=split: self._where(split, i))
        self._labels = labels_by_index
        super().__init__(SourceInfo(
            name=name, num_classes=len(class_names), class_names=class_names,
            num_train=int(labels_by_index[TRAIN].size),
            num_validation=int(labels_by_index[VALIDATION].size),
            image_size=None, channels=3))

    def _scan_split(self, folder, split):
        files = self._files[split]
        counts, fields = shards.scan(files, _parse_small_fields, ("label", "index"),
                                     f"TFRecord {split} split of {folder}", tag="llp-tfrecord-v1")
        self._counts[split] = counts
        index, labels = fields["index"], fields["label"]
        total = index.size
        where = lambda flat: self._where_flat(split, flat)  # noqa: E731
        out_of_range = np.flatnonzero((index < 0) | (index >= total))
        if out_of_range.size:
            flat = int(out_of_range[0])
            raise DataError(
                f"TFRecord {split} split of {folder}: index {int(index[flat])} at {where(flat)} "
                f"lies outside [0, {total}) ({counted(out_of_range.size, 'such record')}). The "
                f"index feature must number the split's {total} records 0..{total - 1}; rebuild "
                "the shards.")
        order = np.argsort(index, kind="stable")
        repeated = np.flatnonzero(index[order][1:] == index[order][:-1])
        if repeated.size:
            first, second = int(order[repeated[0]]), int(order[repeated[0] + 1])
            raise DataError(
                f"TFRecord {split} split of {folder}: index {int(index[first])} appears more "
                f"than once, at {where(first)} and at {where(second)}. Every record needs its "
                "own index 0..N-1; rebuild the shards.")
        by_index = np.empty(total, np.int64)
        by_index[index] = labels
        self._positions[split] = order
        return by_index

    def _where_flat(self, split, flat):
        counts = self._counts[split]
        shard = int(np.searchsorted(np.cumsum(counts), flat, side="right"))
        position = flat - int(np.sum(counts[:shard]))
        return f"shard {self._files[split][shard]}, record {position}"

    def _where(self, split, index):
        return self._where_flat(split, int(self._positions[split][index]))

    def _serialized(self, split, shard):
        """(shard, position, serialized record) of one shard, no function per record."""
        files = tf.constant(self._files[split] or [""], tf.string)
        return tf.data.Dataset.zip((tf.data.Dataset.from_tensors(shard).repeat(),
                                    tf.data.TFRecordDataset(tf.gather(files, shard)).enumerate()))

    def read_shard(self, split: str, shard: IntTensor) -> tf.data.Dataset:
        return _parsed(self._serialized(split, tf.cast(shard, tf.int64)))


#: Records parsed at once by `_parsed`.
_PARSE_BATCH = 64


def _parsed(serialized):
    """Records of a dataset of (shard, (position, serialized record)), in its order."""
    def parse(shard, numbered):
        position, records = numbered
        parsed = tf.io.parse_example(records, _ALL_FIELDS)
        return {"data": parsed[IMAGE_FEATURE], "label": parsed[LABEL_FEATURE],
                "index": parsed[INDEX_FEATURE], "shard": shard, "position": position}

    return serialized.batch(_PARSE_BATCH).map(parse).unbatch()
