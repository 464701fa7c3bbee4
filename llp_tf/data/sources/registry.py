"""Opening a data source by its ``--dataset`` name (`load_source`); each source module, and
TensorFlow, is imported only when its name form is asked for."""

from typing import TYPE_CHECKING

from llp_tf.counted_nouns import counted
from llp_tf.errors import DataError

if TYPE_CHECKING:
    from llp_tf.data.sources.base import Source, SourceInfo

EMBEDDED = ("mnist5k", "digits")


def load_source(name: str, data_dir: str | None = None) -> "Source":
    """The `Source` of dataset ``name``, one of `base.NAME_FORMS` (a relative folder or file is
    taken relative to ``data_dir`` if given). DataError for an unknown name, a missing path, an
    empty or bad dataset, or fewer than two classes."""
    source = _open_source(name, data_dir)
    _check_classes(source.info, name)
    return source


def _check_classes(info: "SourceInfo", name: str) -> None:
    """Raises DataError when dataset ``name`` has fewer than two classes."""
    if info.num_classes >= 2:
        return
    names = f" ({', '.join(map(repr, info.class_names))})" if info.class_names else ""
    hints = {"folder": " (folder: one sub-folder per class)",
             "list": " (list: labels 0 to C-1 in the list files)",
             "tfrecord": " (tfrecord: labels 0 to C-1 in the shards)"}
    hint = hints.get(name.partition(":")[0], "")
    raise DataError(f"{{dataset}} has {counted(info.num_classes, 'class')}{names}: a "
                    "classification needs at least two (with one, top-1 is 1.0 whatever the "
                    f"network learns); give a dataset of two or more classes{hint}.",
                    settings={"dataset": name})


def _open_source(name: str, data_dir: str | None) -> "Source":
    """The `Source` of ``name`` (see `load_source`)."""
    from llp_tf.data.sources.base import NAME_FORMS, resolve_path  # noqa: PLC0415 -- imports TF
    if not isinstance(name, str) or not name:
        raise DataError(f"Dataset name {name!r} is not valid; give one of {NAME_FORMS}.")
    kind, _, rest = name.partition(":")
    if name in EMBEDDED:
        from llp_tf.data.sources import embedded  # noqa: PLC0415 -- imports TFDS
        return embedded.load(name, data_dir)
    if kind == "tfds" and rest:
        from llp_tf.data.sources.tfds import load as load_tfds  # noqa: PLC0415 -- imports TFDS
        return load_tfds(rest, data_dir)
    if kind == "tfrecord" and rest:
        from llp_tf.data.sources.tfrecord import TFRecordSource  # noqa: PLC0415
        return TFRecordSource(resolve_path(rest, data_dir))
    if kind == "folder" and rest:
        from llp_tf.data.sources.folder import FolderSource  # noqa: PLC0415
        return FolderSource(resolve_path(rest, data_dir))
    if kind == "list" and rest:
        from llp_tf.data.sources import list_files  # noqa: PLC0415
        return list_files.from_name(rest, data_dir)
    if kind == "places205" and rest:
        from llp_tf.data.sources import places205  # noqa: PLC0415
        return places205.load(rest, data_dir)
    raise DataError(f"Unknown dataset {name!r}. Dataset names have the forms {NAME_FORMS}.")
