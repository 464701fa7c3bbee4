"""Labelled sets given as lists of image file names, such as ImageNet's 1% and 10% subsets
published with SimCLR (docs/data.md, "ImageNet's standard 1% and 10% label subsets"); names are
matched by file name without folders, through `Source.file_names`."""

import os
import shutil

import numpy as np

from llp_tf.data.sources.base import Source
from llp_tf.data.splits import regime
from llp_tf.errors import DataError
from llp_tf.tensor_types import Array

#: Names of the published lists and TFDS's names for them (its SUBSET2FILES keys).
PUBLISHED = {"1percent": "1pct", "10percent": "10pct"}


def published_url(name: str) -> str:
    """str: the URL TFDS's imagenet2012_subset builder downloads list ``name`` from."""
    from tensorflow_datasets.datasets.imagenet2012_subset import (  # noqa: PLC0415
        imagenet2012_subset_dataset_builder as subset_builder)
    return subset_builder.SUBSET2FILES[PUBLISHED[name]]


def published_checksum(name: str) -> tuple[int, str]:
    """(size in bytes, SHA-256 hex) that TFDS records for published list ``name``."""
    from tensorflow_datasets.datasets.imagenet2012_subset import (  # noqa: PLC0415
        imagenet2012_subset_dataset_builder as subset_builder)
    info = subset_builder.Builder.url_infos[published_url(name)]
    return int(info.size), str(info.checksum)


def check_published(path: str, name: str) -> None:
    """Raises DataError unless ``path`` is published list ``name`` as TFDS records it."""
    size, sha256 = published_checksum(name)
    actual_size, actual_sha256 = os.path.getsize(path), regime.file_sha256(path)
    if (actual_size, actual_sha256) != (size, sha256):
        raise DataError(
            f"{path} is not the published label subset {name!r}: it has {actual_size} bytes "
            f"(SHA-256 {actual_sha256}), and TFDS records {size} bytes (SHA-256 {sha256}) for "
            f"{published_url(name)}. The copy is truncated or damaged: delete it and run again "
            "to fetch it anew, or download that file where there is internet access and put "
            "it there.")


def _downloads_dir(data_dir):
    import tensorflow_datasets as tfds  # noqa: PLC0415
    return os.path.join(os.path.expanduser(data_dir or tfds.core.constants.DATA_DIR),
                        "downloads")


def resolve(spec: str, data_dir: str | None = None) -> str:
    """Path of the list file ``spec`` names: a file (``~`` expanded), or "1percent" /
    "10percent", fetched once through TFDS into ``data_dir``'s ``downloads`` and checked
    against TFDS's checksum. DataError if it is missing or cannot be fetched."""
    path = os.path.expanduser(spec)
    if os.path.isfile(path):
        return path
    if spec not in PUBLISHED:
        raise DataError(
            f"Label subset list {spec} does not exist. Give a file of image file names, one "
            f"per line, or the name of a published ImageNet list: "
            f"{', '.join(PUBLISHED)}.")
    from llp_tf.data.sources.tfds import unreachable_host  # noqa: PLC0415 -- imports TFDS
    import tensorflow_datasets as tfds  # noqa: PLC0415

    url = published_url(spec)
    download_dir = _downloads_dir(data_dir)
    kept = os.path.join(download_dir, f"imagenet2012_{spec}.txt")
    if os.path.isfile(kept):
        check_published(kept, spec)
        return kept
    # TFDS retries for minutes offline; a connection attempt takes seconds.
    failure = unreachable_host([url])
    try:
        if failure:
            raise OSError(f"{failure[0]} cannot be reached ({failure[1]})")
        fetched = os.fspath(tfds.download.DownloadManager(download_dir=download_dir)
                            .download(url))
    except Exception as error:  # noqa: BLE001 -- any download failure, in one paragraph
        raise DataError(
            f"Cannot fetch the published label subset {spec!r} from {url} into {download_dir}: "
            f"{' '.join(str(error).split())}. Download that file where there is internet "
            f"access and put it at {kept}, where it is checked against TFDS's "
            "checksum.") from None
    check_published(fetched, spec)
    shutil.copyfile(fetched, kept + ".tmp")
    os.replace(kept + ".tmp", kept)
    return kept


def read_list(path: str) -> list[str]:
    """list of str: the file names listed in ``path``, in order, without folders and repeats
    (blank and ``#`` lines skipped, a UTF-8 byte-order mark allowed)."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"Cannot read the label subset list {path}: {error}.") from None
    names = [os.path.basename(line.strip()) for line in lines
             if line.strip() and not line.lstrip().startswith("#")]
    if not names:
        raise DataError(f"The label subset list {path} names no image (one file name per "
                        "line, e.g. n01440764_10026.JPEG).")
    return list(dict.fromkeys(names))


def labelled_index(names: list[str], file_names: Array, list_path: str,
                  dataset_name: str) -> Array:
    """int64 sorted indices of the listed ``names`` in ``file_names`` (str [N], by index);
    DataError for a name that is not a training image, or names several."""
    file_names = np.asarray(file_names, dtype=str)
    order = np.argsort(file_names, kind="stable")
    ordered = file_names[order]
    wanted = np.asarray(names, dtype=str)
    first = np.searchsorted(ordered, wanted, side="left")
    last = np.searchsorted(ordered, wanted, side="right")
    missing = wanted[first == last]
    if missing.size:
        shown = ", ".join(missing[:5]) + (", ..." if missing.size > 5 else "")
        raise DataError(
            f"{missing.size} of the {wanted.size} images listed in {list_path} are not in the "
            f"training split of {dataset_name} ({shown}). The list must name training images "
            "of this dataset by file name; check that the dataset is complete and that the "
            "list is the one made for it.")
    repeated = wanted[last - first > 1]
    if repeated.size:
        raise DataError(
            f"{repeated.size} of the images listed in {list_path} match several training "
            f"examples of {dataset_name} by file name (the first: {repeated[0]}); file names "
            "must identify the examples.")
    return np.sort(order[first]).astype(np.int64)


def make_subset_splits(source: Source, spec: str, data_percent: float, seed: int | None = None,
                       data_dir: str | None = None,
                       excluded: Array | None = None) -> tuple[Array, Array, str]:
    """(labelled_index, used_index, list_path) of a run labelled by subset list ``spec``
    (`resolve`), its used subset drawn around it (`regime.splits_from_labelled`); a listed
    example in ``excluded`` is not labelled."""
    path = resolve(spec, data_dir)
    labelled = labelled_index(read_list(path), source.file_names("train"), path,
                            source.info.name)
    labelled, used = regime.splits_from_labelled(source.train_labels(), labelled, data_percent,
                                               seed, source.info.num_classes, excluded)
    return labelled, used, path


def list_record(spec: str, path: str) -> dict:
    """{"list": spec, "path": absolute path, "sha256": hex}: what a split and a run record of
    the subset list ``spec`` read from ``path``."""
    return {"list": spec, "path": os.path.abspath(path), "sha256": regime.file_sha256(path)}
