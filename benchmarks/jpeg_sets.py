"""JPEG test sets of the input benchmark, drawn with fixed seeds.

Each function returns a list of JPEG bytes (quality 90, 4:2:0);
`write_jpeg_records` writes such a list as a TFRecord training set of the
authors' format.
"""

import json
import os

import numpy as np
import tensorflow as tf

from llp_tf.data.sources.tfrecord import serialize_example, shard_name


def smooth_jpegs(count, size=224):
    """``count`` smooth random ``size`` x ``size`` images plus Gaussian pixel
    noise (stddev 12)."""
    rng = np.random.default_rng(0)
    jpegs = []
    for index in range(count):
        coarse = tf.constant(rng.integers(0, 256, (size // 8, size // 8, 3)), tf.float32)
        image = tf.cast(tf.image.resize(coarse, [size, size], method="bicubic")
                        + tf.random.stateless_normal([size, size, 3], [index, 0], stddev=12.0),
                        tf.float32)
        jpegs.append(tf.io.encode_jpeg(tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8),
                                       quality=90).numpy())
    return jpegs


def noisy_jpegs(count):
    """``count`` smooth images plus Gaussian pixel noise (stddev 12), sides
    330-450 px: much of the noise survives quantisation, so entropy decoding
    weighs more than in most photographs."""
    rng = np.random.default_rng(1)
    jpegs = []
    for index in range(count):
        height, width = (int(v) for v in rng.integers(330, 451, 2))
        coarse = tf.constant(rng.integers(0, 256, (height // 8, width // 8, 3)), tf.float32)
        image = (tf.image.resize(coarse, [height, width], method="bicubic")
                 + tf.random.stateless_normal([height, width, 3], [index, 1], stddev=12.0))
        jpegs.append(tf.io.encode_jpeg(tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8),
                                       quality=90).numpy())
    return jpegs


def photo_jpegs(count):
    """``count`` crops of real photographs, scikit-learn's sample images
    (china.jpg, flower.jpg, 427x640, installed with it): at the photos' own
    scale (no resampling, which would smooth them), sides 330-450 px,
    randomly transposed and mirrored."""
    from sklearn.datasets import load_sample_images  # noqa: PLC0415

    photos = load_sample_images().images
    rng = np.random.default_rng(0)
    jpegs = []
    for index in range(count):
        photo = photos[index % len(photos)]
        if rng.random() < 0.5:
            photo = photo.transpose(1, 0, 2)
        if rng.random() < 0.5:
            photo = photo[:, ::-1]
        height, width = (int(rng.integers(330, min(450, side) + 1)) for side in photo.shape[:2])
        top = int(rng.integers(0, photo.shape[0] - height + 1))
        left = int(rng.integers(0, photo.shape[1] - width + 1))
        crop = np.ascontiguousarray(photo[top:top + height, left:left + width])
        jpegs.append(tf.io.encode_jpeg(crop, quality=90).numpy())
    return jpegs


def write_jpeg_records(folder, jpegs, shards):
    """Writes ``jpegs`` into a new ``folder`` as ``shards`` TFRecord shards of a
    training set of 10 classes (labels index % 10). Returns the mean bytes
    of a serialised example."""
    os.makedirs(folder)
    total = 0
    for shard in range(shards):
        with tf.io.TFRecordWriter(os.path.join(folder, shard_name("train", shard, shards))) as w:
            for index in range(shard, len(jpegs), shards):
                record = serialize_example(jpegs[index], index % 10, index)
                total += len(record)
                w.write(record)
    with open(os.path.join(folder, "dataset_info.json"), "w") as f:
        json.dump({"class_names": [str(c) for c in range(10)]}, f)
    return total / len(jpegs)
