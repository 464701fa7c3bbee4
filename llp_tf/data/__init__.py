"""The data layer: sources with stable example indices, regime splits, input pipelines.

- `load_source(name, data_dir=None)` opens a dataset (`source.Source`).
- `splits`: the labelled / used subsets of a regime and their files.
- `pipeline`: ``input_fn(input_context)`` builders for training and evaluation.
- `epoch_order`: the order of one training epoch's examples, pass by pass.
- `decode.data_errors`: turns a bad image met inside tf.data into `DataError`.
"""

import os

from llp_tf.data.decode import data_errors
from llp_tf.data.source import NAME_FORMS, SPLITS, TRAIN, VALIDATION, Source, SourceInfo
from llp_tf.errors import DataError

EMBEDDED = ("mnist5k", "digits")

__all__ = ["EMBEDDED", "NAME_FORMS", "SPLITS", "TRAIN", "VALIDATION", "Source", "SourceInfo",
           "data_errors", "load_source"]


def _resolve(path, data_dir):
    path = os.path.expanduser(path)
    if data_dir is not None and not os.path.isabs(path):
        path = os.path.join(os.path.expanduser(data_dir), path)
    return path


def load_source(name: str, data_dir: str | None = None) -> Source:
    """Opens a dataset by name.

    Args:
      name: one of
        - "mnist5k", "digits": embedded datasets (prepared into ``data_dir``,
          TFDS's default when None);
        - "tfds:<name>": a TFDS dataset in ``data_dir`` (prepared if needed);
        - "tfrecord:<folder>": shards in the authors' format;
        - "folder:<folder>": class sub-folders of images.
        A relative folder is taken relative to ``data_dir`` when given.
      data_dir: optional str.

    Returns:
      A `Source`.

    Raises:
      DataError: unknown name, missing path, empty or bad dataset.
    """
    if not isinstance(name, str) or not name:
        raise DataError(f"Dataset name {name!r} is not valid; give one of {NAME_FORMS}.")
    kind, _, rest = name.partition(":")
    if name in EMBEDDED:
        from llp_tf.data import embedded  # noqa: PLC0415 -- imports TFDS
        return embedded.load(name, data_dir)
    if kind == "tfds" and rest:
        from llp_tf.data import tfds_source  # noqa: PLC0415 -- imports TFDS
        return tfds_source.load(rest, data_dir)
    if kind == "tfrecord" and rest:
        from llp_tf.data.tfrecord_source import TFRecordSource  # noqa: PLC0415
        return TFRecordSource(_resolve(rest, data_dir))
    if kind == "folder" and rest:
        from llp_tf.data.folder_source import FolderSource  # noqa: PLC0415
        return FolderSource(_resolve(rest, data_dir))
    raise DataError(f"Unknown dataset {name!r}. Dataset names have the forms {NAME_FORMS}.")
