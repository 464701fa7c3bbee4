"""Writes image files (a folder or a file source) as TFRecord shards in the authors' format.

As the release's builder does, training images are listed (classes and files sorted), put in
the order of ``numpy.random.RandomState(seed).permutation`` and numbered 0..N-1 in it (the
``index`` feature), so the shards are already shuffled; validation images keep their order.
JPEGs are stored as they are, other images as JPEG (quality 95); every image is decoded once,
so a corrupt file stops the build with its name. ``dataset_info.json`` names the classes."""

import concurrent.futures
import json
from collections.abc import Callable
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from llp_tf.counted_nouns import counted
from llp_tf.data.sources.base import SPLITS, TRAIN, VALIDATION, FileSource, Source
from llp_tf.data.sources.folder import list_image_folder
from llp_tf.data.sources.tfrecord import INFO_FILE, list_shards, serialize_example, shard_name
from llp_tf.errors import DataError

JPEG_QUALITY = 95
_JPEG_MAGIC = b"\xff\xd8\xff"


def encode_for_record(path: str) -> bytes:
    """bytes: the JPEG to store for the image file ``path`` (DataError if unreadable)."""
    try:
        with open(path, "rb") as f:
            content = f.read()
    except OSError as error:
        raise DataError(f"Cannot read image file {path}: {error.strerror}.") from None
    try:
        image = tf.io.decode_image(content, channels=3, expand_animations=False)
        if content.startswith(_JPEG_MAGIC):
            return content
        return tf.io.encode_jpeg(image, quality=JPEG_QUALITY).numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError) as error:
        raise DataError(
            f"Cannot decode image file {path} ({error.message.splitlines()[0].strip()}): it is "
            "empty, truncated, or not a JPEG, PNG, GIF or BMP image. Replace or remove it and "
            "build again.") from None


def _shard_bounds(count, num_shards):
    return [(s * count // num_shards, (s + 1) * count // num_shards) for s in range(num_shards)]


def _write_split(split, paths, labels, indices, output_dir, num_shards, pool, log):
    count = len(paths)
    num_shards = max(1, min(num_shards, count))
    for shard, (start, end) in enumerate(_shard_bounds(count, num_shards)):
        target = os.path.join(output_dir, shard_name(split, shard, num_shards))
        encoded = pool.map(encode_for_record, paths[start:end])
        with tf.io.TFRecordWriter(target) as writer:
            for position, image in enumerate(encoded, start):
                writer.write(serialize_example(image, labels[position], indices[position]))
        log(f"wrote {shard_name(split, shard, num_shards)} ({counted(end - start, 'record')})")
    return num_shards


def build_tfrecords(train_dir: str, output_dir: str, validation_dir: str | None = None,
                    train_shards: int = 1024, validation_shards: int = 128, seed: int = 0,
                    num_threads: int | None = None,
                    log: Callable[[str], object] = print) -> dict:
    """Writes the class sub-folders of ``train_dir`` (and ``validation_dir``, with training
    classes) as ``train_shards`` / ``validation_shards`` shards (at most one per image) into
    ``output_dir``, which must hold no shards yet. Returns a dict of num_train, num_validation,
    num_classes, train_shards and validation_shards."""
    _check_shard_counts(train_shards, validation_shards)
    paths, labels, class_names = list_image_folder(os.path.abspath(train_dir))
    splits = {TRAIN: (paths, labels)}
    if validation_dir is not None:
        v_paths, v_labels, _ = list_image_folder(os.path.abspath(validation_dir), class_names)
        splits[VALIDATION] = (v_paths, v_labels)
    return _build(splits, class_names, output_dir, (train_shards, validation_shards), seed,
                  num_threads, log)


def build_tfrecords_from_source(source: Source, output_dir: str, train_shards: int = 1024,
                                validation_shards: int = 128, seed: int = 0,
                                num_threads: int | None = None,
                                log: Callable[[str], object] = print) -> dict:
    """`build_tfrecords` of a source of image files (folder:, list:, places205:), keeping its
    class names and labels; training image i is source index ``permutation[i]``. DataError for
    a source not read from image files."""
    _check_shard_counts(train_shards, validation_shards)
    if not isinstance(source, FileSource):
        raise DataError(
            f"Dataset {source.info.name} is not read from image files, so it cannot be written "
            "as shards: give an image folder (folder:...), list files (list:...) or "
            "places205:..., or --train_dir.")
    splits = {split: (source.paths(split), source.labels(split)) for split in SPLITS
              if source.info.num_examples(split)}
    return _build(splits, source.info.class_names, output_dir,
                  (train_shards, validation_shards), seed, num_threads, log)


def _check_shard_counts(train_shards, validation_shards):
    if train_shards < 1 or validation_shards < 1:
        raise DataError("train_shards and validation_shards must be at least 1.")


def _build(splits, class_names, output_dir, shard_counts, seed, num_threads, log):
    """Writes ``splits`` (split -> (paths, labels by source index))."""
    paths, labels = splits[TRAIN]
    order = np.random.RandomState(seed).permutation(len(paths))
    train = ([paths[i] for i in order], labels[order], np.arange(len(paths), dtype=np.int64))
    validation = ([], np.zeros(0, np.int64), np.zeros(0, np.int64))
    if VALIDATION in splits:
        v_paths, v_labels = splits[VALIDATION]
        validation = (list(v_paths), v_labels, np.arange(len(v_paths), dtype=np.int64))

    os.makedirs(output_dir, exist_ok=True)
    existing = list_shards(output_dir, TRAIN) + list_shards(output_dir, VALIDATION) + [
        path for path in [os.path.join(output_dir, INFO_FILE)] if os.path.lexists(path)]
    if existing:
        raise DataError(
            f"Output folder {output_dir} already holds shards or {INFO_FILE} ({existing[0]}, "
            "...). Remove them or choose an empty folder, so that old and new shards do not "
            "mix and no file is replaced.")
    # Moved in at the end: a failed build leaves no partial set behind.
    scratch = tempfile.mkdtemp(prefix=".incomplete-", dir=output_dir)
    try:
        written = {}
        with concurrent.futures.ThreadPoolExecutor(num_threads or os.cpu_count() or 1) as pool:
            for split, (split_paths, split_labels, split_index), shards in (
                    (TRAIN, train, shard_counts[0]), (VALIDATION, validation, shard_counts[1])):
                if split_paths:
                    written[split] = _write_split(split, split_paths, split_labels, split_index,
                                                  scratch, shards, pool, log)
        summary = {"class_names": list(class_names), "num_classes": len(class_names),
                   "num_train": len(train[0]), "num_validation": len(validation[0]),
                   "train_shards": written.get(TRAIN, 0),
                   "validation_shards": written.get(VALIDATION, 0), "seed": seed}
        with open(os.path.join(scratch, INFO_FILE), "w") as f:
            json.dump(summary, f, indent=1)
        for name in sorted(os.listdir(scratch)):
            os.replace(os.path.join(scratch, name), os.path.join(output_dir, name))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return summary
