"""The contract every data source meets, and what it tells about its data.

A source is one dataset on disk (TFDS, the authors' TFRecords, an image
folder, an embedded set). It has two splits, "train" and "validation"; each
example of a split has a stable integer ``index`` in ``[0, N)``: the same on
every pass, after a restart and on every replica, because it is part of the
data (the TFRecord ``index`` feature) or a function of the fixed storage
order (position in the sorted file list, or shard offset + position in the
shard).

The input pipeline reads every source the same way: a split is a list of
shards, each a dataset of *records* in storage order; records are filtered,
ordered and sharded before `load_image` (or, for a training crop,
`load_crop`) does the expensive reading and decoding. A record is a dict:

- ``data``: string [], the encoded image bytes or a file path (per source);
- ``label``: int64 [], the true class in ``[0, num_classes)``;
- ``index``: int64 [], the stable example index in ``[0, N)``;
- ``shard``, ``position``: int64 [], where the record is stored (for messages).
"""

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

TRAIN = "train"
VALIDATION = "validation"
SPLITS = (TRAIN, VALIDATION)
#: The forms of a dataset name accepted by `registry.load_source`.
NAME_FORMS = ('"mnist5k", "digits", "tfds:<name>" (e.g. "tfds:imagenet2012"), '
              '"tfrecord:<folder>", "folder:<folder>", '
              '"list:<image root>?train=<list file>[&validation=<list file>][&classes=<file>]", '
              '"places205:<folder>"')
#: A record (see the module docstring): field name -> scalar tensor.
Record = dict[str, Tensor]


@dataclasses.dataclass(frozen=True)
class SourceInfo:
    """What the trainer needs to know about a dataset.

    Attributes:
      name: the name it was loaded by, e.g. "mnist5k", "tfds:imagenet2012",
        "tfrecord:/abs/path".
      num_classes: C; labels lie in ``[0, C)``.
      class_names: tuple of C str.
      num_train: N, examples in the train split (indices ``[0, N)``).
      num_validation: examples in the validation split (0 if there is none).
      image_size: (height, width) if every image has that native size, else None.
      channels: native channels (1 for grayscale sources); decoded examples
        always have 3.
    """

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
    """``path`` with ``~`` expanded, taken relative to ``data_dir`` when relative
    and ``data_dir`` is given (how dataset names' folders are resolved)."""
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
    """Raises DataError if any label is outside [0, num_classes).

    Args:
      labels: int64 [N] by index.
      num_classes: C.
      what: str naming the split and dataset, for the message.
      where: optional callable, index -> str naming that example's file or
        shard and record.
    """
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
    """Raises DataError when classes counted from the labels (C = largest label
    + 1, for sources that do not name their classes) leave a class without a
    training example: labels that start at 1, or a stray label far above the
    rest (999 among 0-3 would make 1,000 classes), are the likely causes.

    Args:
      labels: int64 [N] training labels by index; negative ones are ignored
        here (`validate_labels` reports them).
      what: str naming the split and dataset, for the message.
      where: callable, index -> str naming that example's file or record.
      declare: str, how to name the classes instead (then gaps are allowed).
    """
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

    #: True if images were already decoded successfully when the data was
    #: written (TFDS), so a decode failure cannot come from a bad file.
    trusted_bytes = False
    #: How to repair an undecodable image while keeping its example index.
    repair = "Replace the image with a valid one"
    #: Records of a shuffle block; None: the whole split (records are small).
    #: Records hold the encoded image, so for ImageNet a block of 8192 takes
    #: about 0.9 GB (two blocks are in memory at once).
    shuffle_block = 8192

    def __init__(self, info: SourceInfo) -> None:
        self.info = info

    # -- labels ----------------------------------------------------------
    @abc.abstractmethod
    def labels(self, split: str) -> Array:
        """np.int64 [N]: the true class of each example of ``split`` by index."""

    def file_names(self, split: str) -> Array:
        """np.str_ [N]: the image file name (no folder) of each example of ``split``
        by index, for labelled sets given as file-name lists.

        Raises DataError for sources that do not record file names.
        """
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

    # -- reading -----------------------------------------------------------
    @abc.abstractmethod
    def num_shards(self, split: str) -> int:
        """int: number of shards of ``split``."""

    @abc.abstractmethod
    def read_shard(self, split: str, shard: IntTensor) -> tf.data.Dataset:
        """Records of one shard in storage order.

        Args:
          split: "train" or "validation".
          shard: int64 [] tensor, in ``[0, num_shards(split))``.

        Returns:
          tf.data.Dataset of records (see the module docstring).
        """

    @abc.abstractmethod
    def load_image(self, record: Record) -> IntTensor:
        """uint8 [H, W, 3] of a record (reads the file if ``data`` is a path)."""

    def load_encoded(self, record: Record) -> StringTensor | None:
        """string []: the record's encoded image bytes (read from the file if
        ``data`` is a path), or None for a source that does not hold encoded
        images; then `load_crop` decodes with `load_image`."""
        del record
        return None

    def load_crop(self, record: Record, window_fn: crop_decode.WindowFn,
                  fused: bool = True) -> IntTensor:
        """uint8 [h, w, 3]: the window of the record's image that ``window_fn``
        picks from the image's shape (see `crop_decode.WindowFn`). With
        ``fused`` and JPEG bytes, only the window is decoded
        (`crop_decode.decode_window`); otherwise the image is decoded whole
        (`load_image`) and cropped."""
        encoded = self.load_encoded(record) if fused else None
        if encoded is None:
            return crop_decode.crop_image(self.load_image(record), window_fn)
        return crop_decode.decode_window(encoded, window_fn)

    @abc.abstractmethod
    def describe(self, split: str, record: Record) -> StringTensor:
        """string []: names the record's file, or shard and record, for messages."""

    # -- derived -----------------------------------------------------------
    def require_split(self, split: str) -> None:
        """Raises DataError if ``split`` is unknown or has no examples."""
        check_split(split)
        if self.info.num_examples(split) == 0:
            raise DataError(
                f"Dataset {self.info.name} has no {split} examples; give a source with a "
                f"{split} split (for image folders a '{split}' sub-folder, for TFRecords "
                f"'{split}-*' shards).")

    def records(self, split: str, cycle_length: int = 16) -> tf.data.Dataset:
        """Dataset of all records of ``split``, shards read in order and interleaved
        deterministically (so the order is fixed, though not index order)."""
        self.require_split(split)
        shards = tf.data.Dataset.range(self.num_shards(split))
        cycle = max(1, min(cycle_length, self.num_shards(split)))
        return shards.interleave(lambda s: self.read_shard(split, s), cycle_length=cycle,
                                 block_length=1, num_parallel_calls=tf.data.AUTOTUNE,
                                 deterministic=True)

    def decode(self, records: tf.data.Dataset, split: str,
               load_fn: Callable[[Record], IntTensor] | None = None) -> tf.data.Dataset:
        """Dataset of (record, uint8 [H, W, 3] image); see `decode.decode_checked`.

        ``load_fn`` (record -> uint8 [h, w, 3], or a nest holding it) replaces
        `load_image`, e.g. a `load_crop` that decodes only a training crop; a
        failure names the record all the same.
        """
        load_fn = load_fn or self.load_image
        if self.trusted_bytes:
            return decode.decode_unchecked(records, load_fn)
        return decode.decode_checked(records, load_fn, lambda r: self.describe_example(split, r),
                                     self.bad_image_advice())

    def describe_example(self, split: str, record: Record) -> StringTensor:
        """string []: `describe` and the example's split and index, e.g. "file
        /data/cat/1.jpg (train example 17)"."""
        return tf.strings.join([self.describe(split, record), f" ({split} example ",
                                tf.strings.as_string(record["index"]), ")"])

    def bad_image_advice(self) -> str:
        """What to do about an image that cannot be decoded, so that a run
        that met it can resume or a new one can leave it out."""
        return (f"{self.repair}, and rerun: the run resumes. Or leave out every bad image: "
                f"tools/check_data.py --dataset={self.info.name} --write_exclude_list=FILE "
                "finds them all, and a new run given --exclude_list=FILE never draws them (a "
                "run keeps the exclusions it started with).")

    def raw_dataset(self, split: str) -> tf.data.Dataset:
        """Decoded examples of ``split`` in storage order (shard by shard), which is
        index order for TFDS, embedded and folder sources.

        Returns:
          tf.data.Dataset of {"image": uint8 [H, W, 3], "label": int64 [],
          "index": int64 []}. Iterate it inside `decode.data_errors()` to get
          a `DataError` for a bad image.
        """
        return self.decode(self.records(split, cycle_length=1), split).map(
            lambda r, image: {"image": image, "label": r["label"], "index": r["index"]})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.info.name!r})"


class ShardFileSource(Source):
    """A source whose splits are lists of record files, with labels known by index.

    Subclasses set ``self._files`` (split -> list of file paths) and
    ``self._labels`` (split -> int64 [N] labels by stable index); their
    records carry the encoded image as "data" and where it came from as
    "shard" and "position".
    """

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
    """A source whose examples are image files, listed by path with labels by index.

    Subclasses set ``self._paths`` (split -> list of absolute file paths, str,
    by stable index) and ``self._labels`` (split -> int64 [N]). A record's
    "data" is the file path; the file is read when the example is needed, so
    an unreadable or corrupt file is reported then, by name.
    """

    # Records are file paths, so a whole split fits in one shuffle block.
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
        del shard  # One shard: the listing.
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
