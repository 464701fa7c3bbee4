"""Image files named by list files: one line per image, ``<path> <label>``, split at a comma if
the line holds one, else at whitespace; blank and ``#`` lines are skipped.

Name form (`registry.load_source`), relative paths taken from ``data_dir`` when given::

    list:<image root>?train=<list file>[&validation=<list file>][&classes=<file>][&check_files=no]

Paths are relative to the image root (a leading "/" dropped), labels integers in [0, C); an
example's index is its position among its list's valid lines. C is the class-name file's number
of names, else ``num_classes``, else the largest label + 1 (then every class needs a training
example: `base.check_inferred_classes`). Without a class-name file, a label whose images all
lie in one folder (after ``strip_components``) that no other label uses is named after it, by
its last component if these are distinct, else by the whole path; any other label is
"class_<i>"."""

import collections
import dataclasses
import os

import numpy as np

from llp_tf.counted_nouns import counted
from llp_tf.data.sources.base import (TRAIN, VALIDATION, FileSource, SourceInfo,
                                check_inferred_classes, resolve_path)
from llp_tf.errors import DataError
from llp_tf.tensor_types import Array

#: The keys of a ``list:`` name's query, e.g. ``list:ROOT?train=FILE``.
QUERY_KEYS = ("train", "validation", "classes", "check_files")
_BOOLEANS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
_LINE_FORMAT = ("Each line of a list file is an image path relative to the image root and an "
                "integer label, separated by whitespace or a comma")
_MISSING_SHOWN = 3


@dataclasses.dataclass(frozen=True)
class ListFile:
    """One parsed list file: its ``path``, and by index the image ``paths`` (N str, relative to
    the image root), ``labels`` (int64 [N]) and 1-based ``lines`` (int64 [N])."""

    path: str
    paths: list
    labels: Array
    lines: Array


def _bad_line(path, number, line, reason):
    return DataError(f"List file {path}, line {number}: {line[:200]!r} {reason}. "
                     f"{_LINE_FORMAT}, e.g. 'a/abbey/00000001.jpg 0'.")


def _parse_line(path, number, line):
    fields = line.split(",") if "," in line else line.split()
    if len(fields) != 2:
        raise _bad_line(path, number, line, f"has {len(fields)} fields instead of 2")
    image, label = fields[0].strip(), fields[1].strip()
    try:
        value = int(label) if "_" not in label else None
    except ValueError:
        value = None
    if value is None:
        raise _bad_line(path, number, line, f"has the label {label!r}, which is not an integer")
    if value < 0:
        raise _bad_line(path, number, line, f"has the negative label {value}")
    if not image.lstrip("/"):
        raise _bad_line(path, number, line, "has an empty image path")
    return image.lstrip("/"), value


def _first_duplicate(list_file):
    first_line = {}
    for image, number in zip(list_file.paths, list_file.lines.tolist()):
        if image in first_line:
            return image, first_line[image], number
        first_line[image] = number
    raise AssertionError("no duplicate")


def parse_list_file(path: str) -> ListFile:
    """The `ListFile` of ``path``; DataError for an unreadable file, a bad line, a path listed
    twice or no examples."""
    paths, labels, lines = [], [], []
    try:
        with open(path, encoding="utf-8-sig") as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if line and not line.startswith("#"):
                    image, label = _parse_line(path, number, line)
                    paths.append(image)
                    labels.append(label)
                    lines.append(number)
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise DataError(f"Cannot read list file {path}: {reason}.") from None
    if not paths:
        raise DataError(f"List file {path} lists no images (it is empty, or has only blank and "
                        f"comment lines). {_LINE_FORMAT}.")
    listed = ListFile(path, paths, np.asarray(labels, np.int64), np.asarray(lines, np.int64))
    if len(set(paths)) != len(paths):
        image, first, again = _first_duplicate(listed)
        raise DataError(f"List file {path} lists {image!r} twice, at lines {first} and {again}; "
                        "each image may be listed once per split. Remove the repeated lines.")
    return listed


def read_class_names(path: str) -> tuple[str, ...]:
    """Tuple of C str: the non-blank lines of ``path``, stripped (line i names class i)."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            names = tuple(line.strip() for line in f if line.strip())
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise DataError(f"Cannot read class-name file {path}: {reason}.") from None
    if not names:
        raise DataError(f"Class-name file {path} is empty; give one class name per line "
                        "(line i names class i).")
    return names


def check_label_range(list_file: ListFile, num_classes: int, classes_from: str) -> None:
    """Raises DataError if a label of ``list_file`` is not below ``num_classes``
    (``classes_from`` says where C comes from)."""
    bad = np.flatnonzero(list_file.labels >= num_classes)
    if bad.size:
        first = int(bad[0])
        raise DataError(
            f"List file {list_file.path}, line {int(list_file.lines[first])}: label "
            f"{int(list_file.labels[first])} is out of range ({counted(bad.size, 'such line')}): "
            f"{classes_from} has {counted(num_classes, 'class')}, so labels must lie in "
            f"[0, {num_classes}). Fix the list or give the right classes.")


def missing_images(root: str, paths: list[str]) -> list[int]:
    """Positions in ``paths`` (relative to folder ``root``) of files that do not exist, listing
    each folder once."""
    listings = {}
    missing = []
    for position, image in enumerate(paths):
        folder, _, name = image.rpartition("/")
        names = listings.get(folder)
        if names is None:
            try:
                names = frozenset(os.listdir(os.path.join(root, folder)))
            except OSError:
                names = frozenset()
            listings[folder] = names
        if name not in names:
            missing.append(position)
    return missing


def check_images_exist(root: str, list_file: ListFile) -> None:
    """Raises DataError naming the count and the first listed images of ``list_file`` missing
    under ``root``."""
    missing = missing_images(root, list_file.paths)
    if missing:
        shown = "; ".join(f"line {int(list_file.lines[m])}: {list_file.paths[m]}"
                          for m in missing[:_MISSING_SHOWN])
        raise DataError(
            f"List file {list_file.path}: {len(missing)} of {len(list_file.paths)} listed images "
            f"do not exist under the image root {root} (first: {shown}). Check the image root "
            "(the folder the listed paths are relative to) or fix the list; check_files=no "
            "skips this check, and then a missing image stops the run when it is read.")


def _folder_names(list_files, strip_components):
    folder_of = {}
    for listed in list_files:
        for image, label in zip(listed.paths, listed.labels.tolist()):
            folder = image.rpartition("/")[0]
            if folder_of.setdefault(label, folder) != folder:
                folder_of[label] = None
    names = {}
    for label, folder in folder_of.items():
        parts = folder.split("/")[strip_components:] if folder else []
        names[label] = "/".join(parts) or None
    return names


def derive_class_names(list_files: list[ListFile], num_classes: int,
                       strip_components: int = 0) -> tuple[str, ...]:
    """Tuple of ``num_classes`` str named after the images' folders (module docstring)."""
    folders = _folder_names(list_files, strip_components)
    uses = collections.Counter(folder for folder in folders.values() if folder is not None)
    shared = {folder for folder, count in uses.items() if count > 1}
    unique = {label: folder for label, folder in folders.items()
              if folder is not None and folder not in shared}
    last = [folder.rpartition("/")[2] for folder in unique.values()]
    if len(set(last)) == len(last):
        unique = {label: folder.rpartition("/")[2] for label, folder in unique.items()}
    return tuple(unique.get(c, f"class_{c}") for c in range(num_classes))


class ListSource(FileSource):
    """Image files named by list files: the ``train_list`` and optional ``validation_list``
    under the image ``root``, classes named by ``class_names_file`` or counted
    (``num_classes``), and ``strip_components`` leading folder components dropped from derived
    class names (1 for Places205). ``check_files``: check that every listed image exists."""

    def __init__(self, root: str, train_list: str, validation_list: str | None = None,
                 class_names_file: str | None = None, num_classes: int | None = None,
                 check_files: bool = True, strip_components: int = 0,
                 name: str | None = None) -> None:
        root = os.path.abspath(os.path.expanduser(root))
        if not os.path.isdir(root):
            raise DataError(f"Image root {root} does not exist or is not a folder. Give the "
                            "folder that the paths in the list files are relative to.")
        lists = {TRAIN: parse_list_file(train_list)}
        if validation_list is not None:
            lists[VALIDATION] = parse_list_file(validation_list)
        if class_names_file is not None:
            class_names = read_class_names(class_names_file)
            classes_from = f"the class-name file {class_names_file}"
        else:
            if num_classes is None:
                train = lists[TRAIN]
                check_inferred_classes(
                    train.labels, f"List file {train.path}",
                    lambda i: f"line {int(train.lines[i])}",
                    "name them in a class-name file (&classes=<file>, line i naming class i)")
            count = num_classes or 1 + max(int(x.labels.max()) for x in lists.values())
            class_names = derive_class_names(list(lists.values()), count, strip_components)
            classes_from = "the dataset"
        for listed in lists.values():
            check_label_range(listed, len(class_names), classes_from)
            if check_files:
                check_images_exist(root, listed)
        self._paths = {split: [os.path.join(root, image) for image in listed.paths]
                       for split, listed in lists.items()}
        self._labels = {split: listed.labels for split, listed in lists.items()}
        self._paths.setdefault(VALIDATION, [])
        self._labels.setdefault(VALIDATION, np.zeros(0, np.int64))
        self.list_files = {split: os.path.abspath(x.path) for split, x in lists.items()}
        name = name or list_name(root, self.list_files.get(TRAIN),
                                 self.list_files.get(VALIDATION), class_names_file)
        super().__init__(SourceInfo(
            name=name, num_classes=len(class_names), class_names=class_names,
            num_train=len(self._paths[TRAIN]), num_validation=len(self._paths[VALIDATION]),
            image_size=None, channels=3))


def list_name(root: str, train_list: str, validation_list: str | None = None,
              class_names_file: str | None = None) -> str:
    """The ``list:`` dataset name of these files (absolute paths)."""
    query = [f"train={os.path.abspath(train_list)}"]
    if validation_list:
        query.append(f"validation={os.path.abspath(validation_list)}")
    if class_names_file:
        query.append(f"classes={os.path.abspath(class_names_file)}")
    return f"list:{os.path.abspath(root)}?{'&'.join(query)}"


def parse_query(name: str, query: str, keys: tuple[str, ...]) -> dict[str, str]:
    """The ``key=value`` pairs of a dataset name's query (after "?", joined by "&"); DataError
    for a key not in ``keys``, a repeated key or a bad pair."""
    pairs = {}
    for part in query.split("&") if query else []:
        key, equals, value = part.partition("=")
        if not equals or not value or key not in keys or key in pairs:
            problem = ("is given twice" if key in pairs else
                       "is not key=value" if not equals or not value else "is unknown")
            raise DataError(f"Dataset {name!r}: {part!r} {problem}; the query takes "
                            f"{', '.join(k + '=...' for k in keys)}, joined by '&'.")
        pairs[key] = value
    if "check_files" in pairs and pairs["check_files"].lower() not in _BOOLEANS:
        raise DataError(f"Dataset {name!r}: check_files={pairs['check_files']} must be yes or "
                        "no.")
    return pairs


def check_files_option(pairs: dict[str, str]) -> bool:
    """The ``check_files`` value of a parsed query (default True)."""
    return _BOOLEANS[pairs.get("check_files", "yes").lower()]


def from_name(rest: str, data_dir: str | None = None) -> ListSource:
    """The `ListSource` of a name ``list:<rest>``."""
    name = f"list:{rest}"
    root, _, query = rest.partition("?")
    pairs = parse_query(name, query, QUERY_KEYS)
    if not root or "train" not in pairs:
        raise DataError(
            f"Dataset {name!r} needs an image root and a train list: "
            "list:<image root>?train=<list file>[&validation=<list file>][&classes=<file>]"
            "[&check_files=no].")
    files = {key: resolve_path(pairs[key], data_dir) if key in pairs else None
             for key in ("train", "validation", "classes")}
    return ListSource(resolve_path(root, data_dir), files["train"], files["validation"],
                      files["classes"], check_files=check_files_option(pairs))
