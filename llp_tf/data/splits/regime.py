"""The regime split: which training examples are labelled and which are used.

A regime ``pPP_qQQ`` labels PP% of each class and trains on QQ% (`make_splits`). A run's split
is saved with the files it was made from and its excluded examples (`save_splits`), and loaded
with a check against the dataset: its number of training examples and a SHA-256 of
``train_labels`` (`load_splits`). The bank holds only the used examples: original index
``used_index[j]`` is bank row j (`dense_index`)."""

import hashlib
import json
import math
import os
import tempfile

import numpy as np

from llp_tf.counted_nouns import counted
from llp_tf.errors import ConfigError, DataError
from llp_tf.tensor_types import Array
from llp_tf.tool_names import tool

SPLIT_FORMAT = "llp-split-v1"
#: Header keys naming the files a split was made from (`save_splits`).
MADE_FROM_KEYS = ("label_subset", "exclude_list")
_SPLITS = ("train", "validation")


def _round_half_up(x):
    # The epsilon keeps e.g. 10% of 1300 at 130 despite float rounding.
    return int(np.floor(x + 0.5 + 1e-9))


def smallest_label_percent(class_size: int) -> float:
    """The smallest percentage of 3 significant digits that labels one of ``class_size``
    examples by `make_splits`' rule (round half up): 50 / class_size rounded up at that
    precision, so the value a hint names is accepted as written."""
    exact = 50.0 / class_size
    decimals = max(0, 2 - math.floor(math.log10(exact)))
    value = math.floor(exact * 10 ** decimals) / 10 ** decimals
    while _round_half_up(value * class_size / 100.0) < 1:
        value = round(value + 10.0 ** -decimals, decimals)
    return value


def _check_percent(name, value):
    if not isinstance(value, (int, float, np.integer, np.floating)) or not 0 < value <= 100:
        raise ConfigError(f"{name} must be a percentage in (0, 100]; got {value!r}.")


def _check_labels(labels, num_classes):
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0 or not np.issubdtype(labels.dtype, np.integer):
        raise DataError("make_splits needs a non-empty 1-D integer array of training labels.")
    if labels.min() < 0 or (num_classes is not None and labels.max() >= num_classes):
        bound = f"[0, {num_classes})" if num_classes is not None else ">= 0"
        raise DataError(f"Training labels must be classes {bound}; found "
                        f"{labels.min()} to {labels.max()}.")
    return labels


def _check_percents(label_percent, data_percent):
    _check_percent("label_percent", label_percent)
    _check_percent("data_percent", data_percent)
    if data_percent < label_percent:
        raise ConfigError(
            f"data_percent ({data_percent}) is below label_percent ({label_percent}); the "
            "used subset must contain the labelled set.")


def _used_extra(members, chosen, count, rng):
    """Up to ``count`` - len(chosen) more of ``members``: the lowest left, or a draw by
    ``rng``."""
    rest = np.setdiff1d(members, chosen)
    extra = max(0, count - len(chosen))
    if rng is None:
        return rest[:extra]
    return rng.choice(rest, size=min(extra, rest.size), replace=False)


def _kept_members(labels, excluded):
    """{class: its example indices in increasing order}, leaving out ``excluded``."""
    kept = np.ones(labels.size, bool)
    if excluded is not None:
        kept[np.asarray(excluded, np.int64)] = False
    return {int(c): np.flatnonzero((labels == c) & kept) for c in np.unique(labels[kept])}


def make_splits(labels: Array, label_percent: float, data_percent: float, seed: int | None = None,
                num_classes: int | None = None,
                excluded: Array | None = None) -> tuple[Array, Array]:
    """(labelled_index, used_index), sorted int64, the first a subset of the second: per class
    of n_c examples not ``excluded`` (int [E]), round(PP% n_c) labelled (half up) and max(that,
    round(QQ% n_c)) used, the labelled ones plus more.

    With ``seed=None`` the lowest indices (the release's rule), else draws without replacement
    by ``numpy.random.default_rng(seed)``, classes in increasing order. ``labels``: int [N] by
    index, in [0, ``num_classes``) if given; classes without a training example are skipped
    (`absent_classes_warning`).

    Raises ConfigError for a percentage outside (0, 100] or QQ < PP, DataError for invalid
    labels or a class with examples but no labelled one."""
    _check_percents(label_percent, data_percent)
    labels = _check_labels(labels, num_classes)
    rng = None if seed is None else np.random.default_rng(seed)
    labelled, used, starved = [], [], []
    for c, members in _kept_members(labels, excluded).items():
        k = _round_half_up(label_percent * members.size / 100.0)
        u = max(k, _round_half_up(data_percent * members.size / 100.0))
        if k == 0:
            starved.append((c, members.size))
            continue
        chosen = members[:k] if rng is None else rng.choice(members, size=k, replace=False)
        labelled.append(chosen)
        used.extend([chosen, _used_extra(members, chosen, u, rng)])
    if starved:
        c, n = min(starved, key=lambda item: item[1])
        needed = smallest_label_percent(n)
        also = (f" (and --data_percent with it, now {data_percent:g})"
                if needed > data_percent else "")
        shown = ", ".join(f"class {cls} ({counted(cnt, 'example')})" for cls, cnt in starved[:5])
        raise DataError(
            f"With label_percent={label_percent}, {counted(len(starved), 'class')} would get no "
            f"labelled example: {shown}{', ...' if len(starved) > 5 else ''}. Every class "
            f"with training examples needs at least one: raise --label_percent to at least "
            f"{needed:g}{also} (class {c} has {counted(n, 'example')}), or choose the labelled "
            f"examples yourself with --split_file ({tool('make_splits')}) or --label_subset (a "
            "list of image file names).")
    if not labelled:
        raise DataError("Every training example is excluded (--exclude_list): nothing is left "
                        "to train on.")
    labelled_index = np.sort(np.concatenate(labelled)).astype(np.int64)
    used_index = np.sort(np.concatenate(used)).astype(np.int64)
    return labelled_index, used_index


def splits_from_labelled(labels: Array, labelled_index: Array, data_percent: float,
                        seed: int | None = None, num_classes: int | None = None,
                        excluded: Array | None = None) -> tuple[Array, Array]:
    """(labelled_index, used_index), sorted int64: the used subset around a labelled set chosen
    elsewhere (``labelled_index``, int [M]), per class up to round(QQ% n_c) as in
    `make_splits`; ``excluded`` examples leave both."""
    _check_percent("data_percent", data_percent)
    labels = _check_labels(labels, num_classes)
    labelled_index = np.unique(np.asarray(labelled_index, np.int64))
    check_index_set("labelled_index", labelled_index, labels.size)
    if excluded is not None:
        labelled_index = np.setdiff1d(labelled_index, excluded)
    if labelled_index.size == 0:
        raise DataError("The labelled set is empty: give at least one labelled example.")
    rng = None if seed is None else np.random.default_rng(seed)
    used = [labelled_index]
    for c, members in _kept_members(labels, excluded).items():
        chosen = labelled_index[labels[labelled_index] == c]
        used.append(_used_extra(members, chosen,
                                _round_half_up(data_percent * members.size / 100.0), rng))
    return labelled_index, np.unique(np.concatenate(used)).astype(np.int64)


def absent_classes_warning(labels: Array, num_classes: int) -> str | None:
    """A one-line warning counting the classes of [0, C) with no training example, or None."""
    missing = np.setdiff1d(np.arange(num_classes), np.asarray(labels))
    if not missing.size:
        return None
    shown = ", ".join(str(c) for c in missing[:5]) + (", ..." if missing.size > 5 else "")
    return (f"warning: {missing.size} of {num_classes} classes have no training example "
            f"(classes {shown}) and get no labelled example; the model keeps all "
            f"{num_classes} class outputs.")


def labels_fingerprint(train_labels: Array) -> str:
    """str: SHA-256 of the training labels as int64, to recognise a dataset."""
    return hashlib.sha256(np.ascontiguousarray(train_labels, dtype="<i8").tobytes()).hexdigest()


def file_sha256(path: str) -> str:
    """str: SHA-256 (hex) of a file's bytes, to recognise a list a split was made from."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dense_index(used_index: Array, index: Array) -> Array:
    """int64 [...]: the positions (bank rows) in ``used_index`` (sorted int64 [U]) of the
    original indices ``index``; DataError for one not in it."""
    used_index = np.asarray(used_index, np.int64)
    index = np.asarray(index, np.int64)
    dense = np.searchsorted(used_index, index)
    if np.any(dense >= used_index.size) or np.any(used_index[np.minimum(
            dense, used_index.size - 1)] != index):
        raise DataError("dense_index: some indices are not in used_index.")
    return dense.astype(np.int64)


def check_index_set(name: str, index: Array, num_examples: int) -> Array:
    """``index`` as int64 [M], or DataError naming ``name`` unless sorted, distinct, in range."""
    index = np.asarray(index)
    if index.ndim != 1 or (index.size and not np.issubdtype(index.dtype, np.integer)):
        raise DataError(f"{name} must be a 1-D integer array of example indices.")
    index = index.astype(np.int64)
    if index.size and (index.min() < 0 or index.max() >= num_examples):
        raise DataError(
            f"{name} has indices outside [0, {num_examples}): from {index.min()} to "
            f"{index.max()}. It was made for a different dataset.")
    if np.any(np.diff(index) <= 0):
        raise DataError(f"{name} must be sorted and without duplicates.")
    return index


def save_splits(path: str, labelled_index: Array, used_index: Array, train_labels: Array,
                dataset_name: str = "", label_percent: float | None = None,
                data_percent: float | None = None, seed: int | None = None,
                made_from: dict | None = None,
                excluded: dict[str, Array] | None = None) -> None:
    """Writes a split file atomically: a NumPy .npz of the index arrays,
    "excluded_<split>_index" (``excluded``: split -> sorted int64 [E], empty by default) and a
    JSON header with a SHA-256 of ``train_labels``, the settings (None: not used) and
    ``made_from``: "label_subset" and "exclude_list", each {"path", "sha256", ...} or None."""
    train_labels = np.asarray(train_labels, np.int64)
    n = train_labels.size
    labelled_index = check_index_set("labelled_index", labelled_index, n)
    used_index = check_index_set("used_index", used_index, n)
    if np.setdiff1d(labelled_index, used_index).size:
        raise DataError("labelled_index must be a subset of used_index.")
    header = {
        "format": SPLIT_FORMAT, "dataset_name": dataset_name, "num_train": int(n),
        "train_labels_sha256": labels_fingerprint(train_labels),
        "label_percent": label_percent, "data_percent": data_percent, "seed": seed,
        "num_labelled": int(labelled_index.size), "num_used": int(used_index.size),
        **dict.fromkeys(MADE_FROM_KEYS), **(made_from or {}),
    }
    arrays = {f"excluded_{split}_index": np.asarray((excluded or {}).get(split, []), np.int64)
              for split in _SPLITS}
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, suffix=".npz")
    try:
        with os.fdopen(handle, "wb") as f:
            np.savez(f, labelled_index=labelled_index, used_index=used_index,
                     header=np.array(json.dumps(header)), **arrays)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def read_split_header(path: str) -> dict:
    """dict: the JSON header of a split file (DataError if it is not one)."""
    return _read(path)[0]


def read_split_indices(path: str) -> tuple[Array, Array]:
    """(labelled_index, used_index) of a split file, unchecked: for tools reading a finished
    run."""
    _, labelled_index, used_index, _ = _read(path)
    return labelled_index.astype(np.int64), used_index.astype(np.int64)


def read_made_from(path: str) -> dict:
    """dict "label_subset"/"exclude_list" -> what the split file records of that file ({"path",
    "sha256", ...}), or None when not used."""
    header = read_split_header(path)
    return {key: header[key] for key in MADE_FROM_KEYS}


def read_split_exclusions(path: str) -> dict[str, Array]:
    """dict "train"/"validation" -> sorted int64 [E]: the examples the split file leaves out."""
    return _read(path)[3]


def _read(path):
    if not os.path.isfile(path):
        raise DataError(f"Split file {path} does not exist. Write one with {tool('make_splits')} "
                        "(a run keeps its own in its run directory).")
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(str(data["header"]))
            labelled_index, used_index = data["labelled_index"], data["used_index"]
            excluded = {split: data[f"excluded_{split}_index"].astype(np.int64)
                        for split in _SPLITS}
        if header.get("format") != SPLIT_FORMAT:
            raise ValueError(f"format is {header.get('format')!r}, not {SPLIT_FORMAT!r}")
        missing = [key for key in MADE_FROM_KEYS if key not in header]
        if missing:
            raise ValueError(f"its header has no {missing[0]!r}")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DataError(f"{path} is not a readable split file ({error}). Write it again with "
                        f"{tool('make_splits')}.") from None
    return header, labelled_index, used_index, excluded


def load_splits(path: str, train_labels: Array,
                dataset_name: str = "") -> tuple[Array, Array]:
    """(labelled_index, used_index), sorted int64, of a split file checked against the
    dataset's ``train_labels`` (int [N]); DataError if it is missing, unreadable or made for
    another dataset."""
    header, labelled_index, used_index, _ = _read(path)
    train_labels = np.asarray(train_labels, np.int64)
    made_for = f"{header.get('dataset_name') or 'a dataset'} with {header.get('num_train')} " \
               "training examples"
    if header.get("num_train") != train_labels.size or \
            header.get("train_labels_sha256") != labels_fingerprint(train_labels):
        if header.get("num_train") != train_labels.size:
            difference = f"has {train_labels.size} training examples"
        else:
            difference = (f"has other labels for its {train_labels.size} training examples "
                          "(other classes, or the examples in another order)")
        raise DataError(
            f"Split file {path} was made for {made_for}, but {dataset_name or 'the dataset'} "
            f"{difference}. Use the split file made for this dataset, or make a new one with "
            f"{tool('make_splits')} (for a new run only).")
    n = train_labels.size
    labelled_index = check_index_set(f"labelled_index in {path}", labelled_index, n)
    used_index = check_index_set(f"used_index in {path}", used_index, n)
    if np.setdiff1d(labelled_index, used_index).size:
        raise DataError(f"Split file {path} is inconsistent: some labelled examples are not in "
                        f"its used subset. Write it again with {tool('make_splits')}.")
    return labelled_index, used_index
