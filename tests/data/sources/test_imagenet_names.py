import os

import tensorflow_datasets as tfds

from llp_tf.data.sources import imagenet_names


def test_every_imagenet2012_class_has_a_name_in_tfds_order():
    tfds_ids_path = os.path.join(os.path.dirname(tfds.__file__), "datasets", "imagenet2012",
                                 "labels.txt")
    with open(tfds_ids_path) as f:
        tfds_ids = [line.strip() for line in f if line.strip()]
    assert list(imagenet_names.wordnet_lemmas()) == tfds_ids
    names = imagenet_names.readable_class_names(tfds_ids)
    assert len(names) == 1000 and all(names) and not set(names) & set(tfds_ids)
    assert names[:3] == ("tench", "goldfish", "great white shark")


def test_names_of_other_datasets_stay():
    assert imagenet_names.readable_class_names(["n01440764", "seven", "n99999999"]) == (
        "tench", "seven", "n99999999")
