"""load_source: the name forms, the message for an unknown one, and datasets of one
class refused from every source."""

import os

import numpy as np
import pytest
import tensorflow_datasets as tfds
from etils import epath

from llp_tf.data.sources.base import NAME_FORMS
from llp_tf.data.sources.registry import load_source
from llp_tf.errors import DataError
from tests.data.helpers import make_tfrecord_set, write_image_folder


@pytest.mark.parametrize("name", ["imagenet", "tfds:", "folder", "s3:bucket", ""])
def test_unknown_name_lists_the_forms(name):
    with pytest.raises(DataError) as error:
        load_source(name)
    message = str(error.value)
    assert NAME_FORMS in message and "\n" not in message


class LlpTestOneClass(tfds.core.GeneratorBasedBuilder):
    """Registered under the name llp_test_one_class: 3 images of the class "only"."""

    VERSION = tfds.core.Version("1.0.0")
    pkg_dir_path = epath.Path(os.path.dirname(os.path.abspath(__file__)))

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(6, 6, 3)),
            "label": tfds.features.ClassLabel(names=["only"])}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for i in range(3):
            yield i, {"image": np.full((6, 6, 3), 40 * i, np.uint8), "label": 0}


def _one_class(kind, root):
    """(dataset name, data_dir, hint) of a dataset of one class "only" (class0 for
    tfrecord), written under ``root`` in the form ``kind``."""
    if kind == "folder":
        write_image_folder(str(root / "train"), {"only": 3})
        write_image_folder(str(root / "validation"), {"only": 2}, seed=1)
        return f"folder:{root}", None, " (folder: one sub-folder per class)"
    if kind == "list":
        written = write_image_folder(str(root / "images"), {"only": 3})
        (root / "train.txt").write_text("".join(
            f"{os.path.relpath(path, root / 'images')} 0\n" for path, _, _ in written))
        return (f"list:{root / 'images'}?train={root / 'train.txt'}", None,
                " (list: labels 0 to C-1 in the list files)")
    if kind == "tfrecord":
        make_tfrecord_set(str(root), num_train=4, num_validation=2, num_classes=1, num_shards=1)
        return f"tfrecord:{root}", None, " (tfrecord: labels 0 to C-1 in the shards)"
    LlpTestOneClass(data_dir=str(root)).download_and_prepare()
    return "tfds:llp_test_one_class", str(root), ""


@pytest.mark.parametrize("kind", ["folder", "list", "tfrecord", "tfds"])
def test_a_dataset_of_one_class_is_refused_whatever_its_source(tmp_path, kind):
    name, data_dir, hint = _one_class(kind, tmp_path)
    with pytest.raises(DataError) as error:
        load_source(name, data_dir)
    only = "'class0'" if kind == "tfrecord" else "'only'"
    assert str(error.value) == (
        f"--dataset={name} has 1 class ({only}): a classification needs at least two (with "
        "one, top-1 is 1.0 whatever the network learns); give a dataset of two or more "
        f"classes{hint}.")
    assert str(error.value.with_origins({"dataset": "command line"})).startswith(
        f"--dataset={name} (command line) has 1 class")
