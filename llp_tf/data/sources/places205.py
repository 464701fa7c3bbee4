"""Places205 as distributed (its image folder and official train/val lists), opened as a
`list_files.ListSource` of 205 scene classes named after their folders without the letter
(docs/data.md, "List files and Places205")."""

import os

from llp_tf.data.sources import list_files
from llp_tf.data.sources.base import resolve_path
from llp_tf.errors import DataError

NUM_CLASSES = 205
IMAGE_FOLDERS = ("images256", os.path.join("data", "vision", "torralba", "deeplearning",
                                           "images256"))
LIST_FOLDER = "trainvalsplit_places205"
TRAIN_LIST = "train_places205.csv"
VALIDATION_LIST = "val_places205.csv"


def _first_existing(candidates, test):
    return next((path for path in candidates if test(path)), None)


def find_layout(root: str) -> tuple[str, str, str]:
    """(image root, train list, validation list): the paths of Places205's parts under
    ``root``, the folder as distributed; DataError naming every path tried when one is
    missing."""
    if not os.path.isdir(root):
        raise DataError(f"Places205 folder {root} does not exist or is not a folder. Give the "
                        "folder the release was unpacked into (holding images256/ or data/, and "
                        f"{LIST_FOLDER}/).")
    image_candidates = [os.path.join(root, folder) for folder in IMAGE_FOLDERS]
    images = _first_existing(image_candidates, os.path.isdir)
    if images is None:
        raise DataError(f"No Places205 image folder in {root}: tried "
                        f"{' and '.join(image_candidates)}. Unpack the images there, or give "
                        "the folder they were unpacked into.")
    list_folders = list(dict.fromkeys([os.path.join(root, LIST_FOLDER),
                                       os.path.join(os.path.dirname(images), LIST_FOLDER)]))
    lists = []
    for file_name in (TRAIN_LIST, VALIDATION_LIST):
        tried = [os.path.join(folder, file_name) for folder in list_folders]
        found = _first_existing(tried, os.path.isfile)
        if found is None:
            raise DataError(f"No Places205 list file {file_name} for {root}: tried "
                            f"{' and '.join(tried)}. Unpack trainvalsplit_places205 (the "
                            "release's train/val split) into that folder.")
        lists.append(found)
    return images, lists[0], lists[1]


def load(rest: str, data_dir: str | None = None) -> list_files.ListSource:
    """The source of ``places205:ROOT[?check_files=no]`` (``rest``); a relative ROOT is taken
    relative to ``data_dir``."""
    name = f"places205:{rest}"
    root, _, query = rest.partition("?")
    pairs = list_files.parse_query(name, query, ("check_files",))
    if not root:
        raise DataError(f"Dataset {name!r} needs a folder: places205:<folder as distributed>.")
    root = os.path.abspath(resolve_path(root, data_dir))
    images, train, validation = find_layout(root)
    return list_files.ListSource(
        images, train, validation, num_classes=NUM_CLASSES,
        check_files=list_files.check_files_option(pairs), strip_components=1,
        name=f"places205:{root}")
