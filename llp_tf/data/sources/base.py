"""The contract every data source meets, and what it tells about its data.

A source is one dataset with splits "train" and "validation"; each example has a stable index
in [0, N), part of the data or a function of its fixed storage order. A split is a list of
shards of *records* in storage order, dicts of scalars: ``data`` string (the encoded image or a
file path), ``label`` int64 in [0, num_classes), ``index`` int64 in [0, N), and ``shard`` and
``position`` int64 (where it is stored, for messages)."""

import abc
import dataclasses
import os
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from llp_tf.counted_nouns import counted
from llp_tf.data.decoding import crop_decode, decode
from llp_tf.errors import DataError
from llp_tf.tensor_types import Array, IntTensor, StringTensor, Tensor
from llp_tf.tool_names import tool

TRAIN = "train"
VALIDATION = "validation"
SPLITS = (TRAIN, VALIDATION)
#: The forms of a dataset name accepted by `registry.load_source`.
NAME_FORMS = ('"mnist5k", "digits", "tfds:<name>" (e.g. "tfds:imagenet2012"), '
              '"tfrecord:<folder>", "folder:<folder>", '
              '"list:<image root>?train=<list file>[&validation=<list file>][&classes=<file>]", '
              '"places205:<folder>"')
Record = dict[str, Tensor]


@dataclasses.dataclass(frozen=True)
class SourceInfo:
    """What the trainer knows of a dataset: its ``name`` (as loaded), ``num_classes`` C and
    ``class_names`` (C str), ``num_train`` N, ``num_validation`` (0 if none), ``image_size``
    ((height, width) if every image has it, else None) and its native ``channels`` (decoded
    images always have 3)."""

    name: str
    num_classes: int
    class_names: tuple
    num_train: int
    num_validation: int
    image_size: tuple | None
    channels: int

    def num_examples(self, split: str) -> int:
        check_split(split)
        return self.num_train if split == TRAIN else self.num_validation


def resolve_path(path: str, data_dir: str | None) -> str:
    """``path`` with ``~`` expanded, taken relative to ``data_dir`` (if given) when relative."""
    path = os.path.expanduser(path)
    if data_dir is not None and not os.path.isabs(path):
        path = os.path.join(os.path.expanduser(data_dir), path)
    return path


def check_split(split: str) -> None:
    """Raises DataError unless ``split`` is "train" or "validation"."""
    if split not in SPLITS:
        raise DataError(f"Unknown split {split!r}; the splits are {', '.join(SPLITS)}.")


def _starts_at_one(labels: Array, num_classes: int) -> bool:
    """Whether ``labels`` look numbered 1..C instead of 0..C-1."""
    return bool(labels.size) and labels.min() == 1 and labels.max() == num_classes


def validate_labels(labels: Array, num_classes: int, what: str,
                    where: Callable[[int], str] | None = None) -> None:
    """Raises DataError if a label of ``labels`` (int64 [N] by index) lies outside [0,
    num_classes); ``what`` names the split and dataset, ``where`` (index -> str) an example's
    file or record."""
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    if bad.size:
        first = int(bad[0])
        place = where(first) if where else f"example {first}"
        cause = (" The labels run from 1 to C: they appear to start at 1." if
                 _starts_at_one(labels, num_classes) else "")
        raise DataError(
            f"{what}: {bad.size} label(s) lie outside [0, {num_classes}); the first is "
            f"{int(labels[first])} at {place}.{cause} Labels must be class numbers "
            f"0..{num_classes - 1}; fix or rebuild the data, or declare the right classes.")


def check_inferred_classes(labels: Array, what: str, where: Callable[[int], str],
                           declare: str) -> None:
    """Raises DataError when classes counted from the labels (C = largest label + 1) leave a
    class without a training example (labels that start at 1, or a stray label); ``declare``
    says how to name the classes instead. Negative labels are left to `validate_labels`."""
    top = int(labels.max()) if labels.size else -1
    missing = np.setdiff1d(np.arange(top + 1), labels)
    if not missing.size:
        return
    if missing.tolist() == [0]:
        raise DataError(
            f"{what}: no record has label 0 and the labels run from 1 to {top}: they appear "
            f"to start at 1, but labels must be class numbers from 0. Rebuild the data with "
            f"every label one lower; or, if class 0 really has no training example, "
            f"{declare}.")
    gap = int(missing[0])
    largest = int(np.argmax(labels))
    shown = ", ".join(str(c) for c in missing[:5]) + (", ..." if missing.size > 5 else "")
    raise DataError(
        f"{what}: the classes are counted from the largest label, {top} at {where(largest)}, "
        f"which makes {top + 1} classes; {missing.size} of them have no training example "
        f"(classes {shown}), and {counted(int(np.sum(labels > gap)), 'record')} with labels beyond "
        "the first of them. A stray or mistyped label is the likely cause: fix it; or, if the "
        f"classes really are 0..{top}, {declare}.")


class Source(abc.ABC):
    """A dataset with a train and a validation split (see the module docstring)."""

    #: Images were decoded when the data was written (TFDS): no bad files.
    trusted_bytes = False
    #: How to repair an undecodable image while keeping its example index.
    repair = "Replace the image with a valid one"
    #: Records of a shuffle block; None: the whole split.
    shuffle_block = 8192

    def __init__(self, info: SourceInfo) -> None:
        self.info = info

    @abc.abstractmethod
    def labels(self, split: str) -> Array:
        """np.int64 [N]: the true class of each example of ``split`` by index."""

    def file_names(self, split: str) -> Array:
        """np.str_ [N]: the image file name (no folder) of each example of ``split`` by index.
        Raises DataError for sources that do not record file names."""
        raise DataError(
            f"Dataset {self.info.name} does not record its images' file names, so a list of "
            "file names cannot be matched to its examples. Use a source that records them: "
            "an image folder (folder:...), list files (list:..., places205:...) or a TFDS "
            "dataset with a file_name feature (such "
            "as tfds:imagenet2012), or give the split as indices with --split_file.")

    def train_labels(self) -> Array:
        """np.int64 [num_train]: class of each training example by its index."""
        return self.labels(TRAIN)

    def validation_labels(self) -> Array:
        """np.int64 [num_validation]: class of each validation example by index."""
        return self.labels(VALIDATION)

    @abc.abstractmethod
    def num_shards(self, split: str) -> int:
        """int: number of shards of ``split``."""

    @abc.abstractmethod
    def read_shard(self, split: str, shard: IntTensor) -> tf.data.Dataset:
        """tf.data.Dataset of the records of ``shard`` (int64 []) of ``split``, in storage
        order."""

    @abc.abstractmethod
    def load_image(self, record: Record) -> IntTensor:
        """uint8 [H, W, 3] of a record (reads the file if ``data`` is a path)."""

    def load_encoded(self, record: Record) -> StringTensor | None:
        """string []: the record's encoded image (read if ``data`` is a path), or None for a
        source without encoded images."""
        del record
        return None

    def load_crop(self, record: Record, window_fn: crop_decode.WindowFn,
                  fused: bool = True) -> IntTensor:
        """uint8 [h, w, 3]: the window that ``window_fn`` (`crop_decode.WindowFn`) picks of the
        record's image; with ``fused`` and JPEG bytes only the window is decoded, otherwise the
        whole image is."""
        encoded = self.load_encoded(record) if fused else None
        if encoded is None:
            return crop_decode.crop_image(self.load_image(record), window_fn)
        return crop_decode.decode_window(encoded, window_fn)

    @abc.abstractmethod
    def describe(self, split: str, record: Record) -> StringTensor:
        """string []: names the record's file, or shard and record, for messages."""

    def require_split(self, split: str) -> None:
        """Raises DataError if ``split`` is unknown or has no examples."""
        check_split(split)
        if self.info.num_examples(split) == 0:
            raise DataError(
                f"Dataset {self.info.name} has no {split} examples; give a source with a "
                f"{split} split (for image folders a '{split}' sub-folder, for TFRecords "
                f"'{split}-*' shards).")

    def records(self, split: str, cycle_length: int = 16) -> tf.data.Dataset:
        """Dataset of all records of ``split``: shards interleaved deterministically (a fixed
        order, not index order)."""
        self.require_split(split)
        shards = tf.data.Dataset.range(self.num_shards(split))
        cycle = max(1, min(cycle_length, self.num_shards(split)))
        return shards.interleave(lambda s: self.read_shard(split, s), cycle_length=cycle,
                                 block_length=1, num_parallel_calls=tf.data.AUTOTUNE,
                                 deterministic=True)

    def decode(self, records: tf.data.Dataset, split: str,
               load_fn: Callable[[Record], IntTensor] | None = None) -> tf.data.Dataset:
        """Dataset of (record, uint8 [H, W, 3] image), `decode.decode_checked`; ``load_fn``
        (record -> uint8 [h, w, 3] or a nest holding it, e.g. a `load_crop`) replaces
        `load_image`."""
        load_fn = load_fn or self.load_image
        if self.trusted_bytes:
            return decode.decode_unchecked(records, load_fn)
        return decode.decode_checked(records, load_fn, lambda r: self.describe_example(split, r),
                                     self.bad_image_advice())

    def describe_example(self, split: str, record: Record) -> StringTensor:
        """string []: `describe` with the example's split and index, e.g. "file /data/cat/1.jpg
        (train example 17)"."""
        return tf.strings.join([self.describe(split, record), f" ({split} example ",
                                tf.strings.as_string(record["index"]), ")"])

    def bad_image_advice(self) -> str:
        """str: how to repair or leave out an image that cannot be decoded."""
        return (f"{self.repair}, and rerun: the run resumes. Or leave out every bad image: "
                f"{tool('check_data')} --dataset={self.info.name} --write_exclude_list=FILE "
                "finds them all, and a new run given --exclude_list=FILE never draws them (a "
                "run keeps the exclusions it started with).")

    def raw_dataset(self, split: str) -> tf.data.Dataset:
        """tf.data.Dataset of ``split``'s decoded examples in storage order, {"image": uint8
        [H, W, 3], "label": int64 [], "index": int64 []}; iterate it inside
        `decode.data_errors()` for a `DataError` on a bad image."""
        return self.decode(self.records(split, cycle_length=1), split).map(
            lambda r, image: {"image": image, "label": r["label"], "index": r["index"]})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.info.name!r})"


class ShardFileSource(Source):
    """A source whose splits are record files: subclasses set ``_files`` (split -> paths) and
    ``_labels`` (split -> int64 [N] by index); ``data`` is the encoded image."""

    repair = ("Rebuild that shard with a valid image in that record, keeping its "
              "index and label")

    def labels(self, split: str) -> Array:
        self.info.num_examples(split)
        return self._labels[split].copy()

    def num_shards(self, split: str) -> int:
        return len(self._files[split])

    def load_encoded(self, record: Record) -> StringTensor:
        return record["data"]

    def load_image(self, record: Record) -> IntTensor:
        return decode.decode_image(self.load_encoded(record))

    def describe(self, split: str, record: Record) -> StringTensor:
        files = tf.constant(self._files[split] or [""], tf.string)
        return tf.strings.join(["shard ", tf.gather(files, record["shard"]), ", record ",
                                tf.strings.as_string(record["position"])])


class FileSource(Source):
    """A source whose examples are image files: subclasses set ``_paths`` (split -> absolute
    paths by index) and ``_labels`` (split -> int64 [N]); ``data`` is the path, read when the
    example is needed."""

    shuffle_block = None
    repair = ("Replace the file with a valid image under the same name (deleting it would "
              "renumber the examples, so that the run could not resume)")

    def labels(self, split: str) -> Array:
        self.info.num_examples(split)
        return self._labels[split].copy()

    def paths(self, split: str) -> list[str]:
        """list of str: the image files of ``split`` by index."""
        self.info.num_examples(split)
        return list(self._paths[split])

    def file_names(self, split: str) -> Array:
        self.info.num_examples(split)
        return np.array([os.path.basename(path) for path in self._paths[split]], dtype=str)

    def num_shards(self, split: str) -> int:
        return 1

    def read_shard(self, split: str, shard: IntTensor) -> tf.data.Dataset:
        del shard
        count = len(self._paths[split])
        index = np.arange(count, dtype=np.int64)
        return tf.data.Dataset.from_tensor_slices({
            "data": tf.constant(self._paths[split], tf.string, shape=[count]),
            "label": self._labels[split], "index": index,
            "shard": np.zeros(count, np.int64), "position": index})

    def load_encoded(self, record: Record) -> StringTensor:
        return tf.io.read_file(record["data"])

    def load_image(self, record: Record) -> IntTensor:
        return decode.decode_image(self.load_encoded(record))

    def describe(self, split: str, record: Record) -> StringTensor:
        return tf.strings.join(["file ", record["data"]])
