"""Writers of small real datasets for the data tests: image folders and TFRecord
shards with genuine JPEG and PNG bytes (encoded by TensorFlow)."""

import json
import os

import numpy as np
import tensorflow as tf


def random_image(rng, height, width, channels=3):
    """uint8 [H, W, C] of smooth random colour blobs (compresses like a photo)."""
    small = rng.integers(0, 256, (max(2, height // 4), max(2, width // 4), channels))
    image = tf.image.resize(tf.constant(small, tf.float32), [height, width], method="bilinear")
    return np.clip(np.round(image.numpy()), 0, 255).astype(np.uint8)


def encode(image, fmt):
    """bytes of uint8 [H, W, C] as "jpeg" or "png"."""
    if fmt == "png":
        return tf.io.encode_png(image).numpy()
    return tf.io.encode_jpeg(image, quality=90).numpy()


def decoded(content):
    """uint8 [H, W, 3] as the data layer decodes ``content``."""
    return tf.io.decode_image(content, channels=3, expand_animations=False).numpy()


def write_image_folder(root, counts, seed=0, size=(12, 10), grayscale_every=0):
    """Writes root/<class>/<file> images.

    Args:
      counts: dict class name -> number of images.
      grayscale_every: if > 0, every n-th image is a 1-channel PNG.

    Returns:
      list of (path, class name, file bytes) in sorted (class, file) order.
    """
    rng = np.random.default_rng(seed)
    written = []
    k = 0
    for name in sorted(counts):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(counts[name]):
            k += 1
            gray = grayscale_every and k % grayscale_every == 0
            fmt = "png" if gray or i % 2 else "jpeg"
            image = random_image(rng, size[0] + i % 3, size[1], 1 if gray else 3)
            content = encode(image, fmt)
            path = os.path.join(root, name, f"img{i:03d}.{'png' if fmt == 'png' else 'jpg'}")
            with open(path, "wb") as f:
                f.write(content)
            written.append((path, name, content))
    return sorted(written)


def example_bytes(image_bytes, label, index, image_key="images"):
    """A serialized tf.train.Example in the authors' format."""
    feature = {
        image_key: tf.train.Feature(bytes_list=tf.train.BytesList(value=[image_bytes])),
        "labels": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        "index": tf.train.Feature(int64_list=tf.train.Int64List(value=[index])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_shards(folder, split, records, num_shards):
    """Writes serialized ``records`` into ``num_shards`` shards named like the
    release's; returns the shard paths."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    bounds = np.linspace(0, len(records), num_shards + 1).astype(int)
    for s in range(num_shards):
        path = os.path.join(folder, f"{split}-{s:05d}-of-{num_shards:05d}")
        with tf.io.TFRecordWriter(path) as writer:
            for record in records[bounds[s]:bounds[s + 1]]:
                writer.write(record)
        paths.append(path)
    return paths


def make_tfrecord_set(folder, num_train=24, num_validation=7, num_classes=3, num_shards=3,
                      seed=0, class_names=True, size=(10, 9)):
    """A small dataset in the authors' format with indices in a random order.

    Returns:
      dict split -> (images uint8 [N, H, W, 3] by index, labels int64 [N] by index).
    """
    rng = np.random.default_rng(seed)
    truth = {}
    for split, count, shards in (("train", num_train, num_shards),
                                 ("validation", num_validation, 2)):
        labels = np.arange(count) % num_classes
        images = np.stack([random_image(rng, *size) for _ in range(count)])
        contents = [encode(image, "png" if i % 3 == 0 else "jpeg")
                    for i, image in enumerate(images)]
        storage = rng.permutation(count)  # index of the record at each storage position
        records = [example_bytes(contents[i], int(labels[i]), int(i)) for i in storage]
        write_shards(folder, split, records, shards)
        truth[split] = (np.stack([decoded(c) for c in contents]), labels.astype(np.int64))
    if class_names:
        with open(os.path.join(folder, "dataset_info.json"), "w") as f:
            json.dump({"class_names": [f"class{c}" for c in range(num_classes)]}, f)
    return truth


def all_labelled(source):
    """int64 [N]: every training example of ``source``, as a training input's
    ``labelled_index`` where every label may be read."""
    return np.arange(source.info.num_train, dtype=np.int64)
