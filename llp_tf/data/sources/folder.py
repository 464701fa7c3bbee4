"""Image folders read directly, one sub-folder per class: ``root/train/<class>/<image>`` and
optionally ``root/validation/...`` (or ``root/val/...``), or ``root/<class>/<image>`` (a train
split only).

Classes are the train split's sub-folders, sorted (label = position). Images end in .jpg,
.jpeg, .png, .gif or .bmp (any case); names starting with "." are skipped, any other file or a
nested folder is an error. An example's index is its position sorted by class, then file name."""

import os

import numpy as np

from llp_tf.counted_nouns import counted
from llp_tf.data.sources.base import TRAIN, VALIDATION, FileSource, SourceInfo
from llp_tf.errors import DataError
from llp_tf.tensor_types import Array

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")
VALIDATION_FOLDERS = ("validation", "val")


def _visible_entries(folder):
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))


def list_image_folder(folder: str, class_names: tuple[str, ...] | None = None
                      ) -> tuple[list[str], Array, tuple[str, ...]]:
    """(paths sorted by class then file name, int64 [N] labels, class names) of ``folder``'s
    class sub-folders; with ``class_names`` (a validation split) each must be one of them."""
    if not os.path.isdir(folder):
        raise DataError(f"Image folder {folder} does not exist or is not a folder.")
    entries = _visible_entries(folder)
    stray = [e for e in entries if not os.path.isdir(os.path.join(folder, e))]
    if stray:
        raise DataError(
            f"Image folder {folder} holds {os.path.join(folder, stray[0])}, which is not a "
            "class sub-folder. Put every image in a sub-folder named after its class "
            "(folder/<class>/<image>) and move other files away.")
    if not entries:
        raise DataError(
            f"Image folder {folder} has no class sub-folders, so the dataset is empty. "
            "Expected folder/<class>/<image>.")
    if class_names is None:
        class_names = tuple(entries)
    else:
        unknown = [e for e in entries if e not in class_names]
        if unknown:
            raise DataError(
                f"Image folder {folder} has a class sub-folder {unknown[0]!r} that the train "
                f"split does not have ({counted(len(class_names), 'train class')}). Every "
                "validation class must also be a train class.")
    paths, labels = [], []
    for name in entries:
        class_folder = os.path.join(folder, name)
        files = _visible_entries(class_folder)
        for file_name in files:
            path = os.path.join(class_folder, file_name)
            if os.path.isdir(path) or not file_name.lower().endswith(IMAGE_EXTENSIONS):
                raise DataError(
                    f"{path} is not an image file (expected names ending in "
                    f"{', '.join(IMAGE_EXTENSIONS)}, and no nested folders). Move it out of "
                    f"{folder}.")
            paths.append(path)
            labels.append(class_names.index(name))
        if not files:
            raise DataError(
                f"Class folder {class_folder} has no images. Remove the empty class folder "
                "or add its images.")
    return paths, np.asarray(labels, np.int64), class_names


class FolderSource(FileSource):
    """Images read straight from class sub-folders."""

    def __init__(self, folder: str) -> None:
        folder = os.path.abspath(os.path.expanduser(folder))
        if not os.path.isdir(folder):
            raise DataError(
                f"Image folder {folder} does not exist or is not a folder. Give a folder "
                "with class sub-folders, or with train/ (and validation/) folders of class "
                "sub-folders.")
        if os.path.isdir(os.path.join(folder, TRAIN)):
            train_folder = os.path.join(folder, TRAIN)
            validation_folder = next(
                (os.path.join(folder, v) for v in VALIDATION_FOLDERS
                 if os.path.isdir(os.path.join(folder, v))), None)
        else:
            train_folder, validation_folder = folder, None
        paths, labels, class_names = list_image_folder(train_folder)
        self._paths = {TRAIN: paths}
        self._labels = {TRAIN: labels}
        if validation_folder is not None:
            paths, labels, _ = list_image_folder(validation_folder, class_names)
        else:
            paths, labels = [], np.zeros(0, np.int64)
        self._paths[VALIDATION] = paths
        self._labels[VALIDATION] = labels
        super().__init__(SourceInfo(
            name=f"folder:{folder}", num_classes=len(class_names), class_names=class_names,
            num_train=len(self._paths[TRAIN]), num_validation=len(self._paths[VALIDATION]),
            image_size=None, channels=3))
