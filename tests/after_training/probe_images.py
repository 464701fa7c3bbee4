"""The feature tests' view of an image-folder dataset: its images decoded here,
independently of the data layer, and the model's features of them."""

import os

import numpy as np
import tensorflow as tf

from llp_tf.data.augmentation import eval_transform


def read_folder_split(dataset, split):
    """uint8 [N, H, W, 3] and labels int64 [N] of an image-folder split, in index
    order (class folders sorted, then file names), decoded from the PNG files."""
    root = os.path.join(dataset.split(":", 1)[1], split)
    images, labels = [], []
    for label, kind in enumerate(sorted(os.listdir(root))):
        for name in sorted(os.listdir(os.path.join(root, kind))):
            with open(os.path.join(root, kind, name), "rb") as f:
                images.append(tf.io.decode_png(f.read(), channels=3).numpy())
            labels.append(label)
    return np.stack(images), np.array(labels, np.int64)


def centre_crop_features(model, images, image_size):
    """float32 [N, F]: the model's pooled features of the images' centre crops,
    in one forward pass (``training=False``)."""
    crops = tf.stack([eval_transform.eval_preprocess(tf.constant(image), image_size)
                      for image in images])
    return model(crops, training=False)["features"].numpy()
