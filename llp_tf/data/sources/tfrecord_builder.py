"""Writes an image folder, or any source of image files, as TFRecord shards in
the authors' format.

Like the release's builder: the training images are listed (classes sorted,
files sorted), put in the order of ``numpy.random.RandomState(seed)
.permutation`` (seed 0 by default), and numbered 0..N-1 in that order; the
``index`` feature is that number and records are written in that order, so
the shards are already shuffled. Validation images keep the listing order.
Labels are the class folder's position in the sorted class list. A source of
image files (`build_tfrecords_from_source`: folder:, list:, places205:) keeps
its labels and class names, and its training images are numbered in the same
seeded permutation of their source indices.

JPEG files that TensorFlow decodes are stored as they are; other images
(PNG, GIF, BMP) are decoded and stored as JPEG (quality 95). Every image is
decoded once here, so a corrupt file stops the build with its name.
Shards are ``train-SSSSS-of-TTTTT`` / ``validation-...`` (records split as
evenly as possible), and ``dataset_info.json`` names the classes.
"""

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
    """Writes ``train_dir`` (and ``validation_dir``) as shards into ``output_dir``.

    Args:
      train_dir: str, folder of class sub-folders of training images.
      output_dir: str, created if needed; must hold no shards yet.
      validation_dir: optional str, the same for validation images (its
        classes must be training classes).
      train_shards, validation_shards: int, shards per split (at most one per
        image).
      seed: int, seed of the training permutation.
      num_threads: images encoded in parallel (default: CPU count).
      log: callable taking a progress line.

    Returns:
      dict with num_train, num_validation, num_classes, train_shards,
      validation_shards.
    """
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
    """Writes a source of image files (folder:, list:, places205:) as shards into
    ``output_dir``, as `build_tfrecords` does an image folder.

    The source's class names and labels are kept; training images are
    renumbered in the seeded permutation of their source indices (the new
    index i is source index ``permutation[i]``), validation images keep
    their indices. Arguments and result as `build_tfrecords`.

    Raises:
      DataError: the source is not read from image files.
    """
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
    # Shards are written to a scratch folder and moved in at the end, so a
    # failed build leaves no partial set behind.
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
