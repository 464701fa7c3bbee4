"""The memory bank for TensorBoard's projector plugin: a seeded sample of bank rows
(`sample_bank`) written as embeddings.tsv (one row per line), metadata.tsv (a header, then
one line per row) and the plugin's projector_config.pbtxt naming both (`write_projector`).
The true class is evaluation data: it is read here for display only."""

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from llp_tf.core import label_encoding
from llp_tf.tensor_types import Array

#: Bank rows written unless asked otherwise: the projector stays responsive in a browser.
DEFAULT_ROWS = 10_000
#: The folder of the analysis that holds the three files, and the tensor's name in it.
SUBDIR = "projector"
TENSOR_NAME = "bank"
CONFIG_FILE = "projector_config.pbtxt"  # the plugin's PROJECTOR_FILENAME
EMBEDDINGS_FILE = "embeddings.tsv"
METADATA_FILE = "metadata.tsv"
FILES = (CONFIG_FILE, EMBEDDINGS_FILE, METADATA_FILE)
METADATA_COLUMNS = ("class", "labelled", "confidence", "true_class", "bank_row", "example")
#: The class column of a row that holds an instance id (not yet propagated to), and the
#: true class column of a row whose class is unknown.
NO_CLASS = "none"
#: Significant digits of embeddings.tsv: a float32 reads back exactly.
FLOAT32_DIGITS = 9


@dataclasses.dataclass(frozen=True)
class ProjectorSample:
    """S of the N bank rows (``rows`` int64 [S], sorted; ``examples`` int64 [S], their
    training-set indices): ``embeddings`` float32 [S, D]; the bank's ``classes`` int64 [S]
    (true or propagated, -1 for an instance id); ``confidence`` float32 [S]; ``labelled``
    bool [S]; ``true_classes`` int64 [S] (evaluation only; -1 where unknown)."""

    rows: Array
    examples: Array
    embeddings: Array
    classes: Array
    confidence: Array
    labelled: Array
    true_classes: Array
    class_names: tuple[str, ...]
    bank_rows: int
    seed: int


def sample_rows(num_rows: int, max_rows: int, seed: int) -> Array:
    """Sorted int64 [min(N, max_rows)]: every row when N <= ``max_rows``, else a uniform
    draw without replacement seeded by ``seed``."""
    if num_rows <= max_rows:
        return np.arange(num_rows, dtype=np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(num_rows, max_rows, replace=False)).astype(np.int64)


def sample_bank(rows_at: Callable[[Array], Mapping[str, Array]], num_rows: int,
                true_classes: Array, used_index: Array, class_names: Sequence[str],
                max_rows: int = DEFAULT_ROWS, seed: int = 0) -> ProjectorSample:
    """`ProjectorSample` of at most ``max_rows`` of a bank of ``num_rows`` N rows:
    ``rows_at(rows int64 [S])`` gives the bank's "embeddings" float32 [S, D], "labels" int64
    [S] (`label_encoding`), "confidence" float32 [S] and "is_labelled" bool [S] of those rows
    (`StoredBank.rows_at`'s); ``true_classes`` int64 [N], ``used_index`` int64 [N] (row ->
    example)."""
    rows = sample_rows(num_rows, max_rows, seed)
    values = rows_at(rows)
    return ProjectorSample(
        rows=rows, examples=np.asarray(used_index, np.int64)[rows],
        embeddings=np.asarray(values["embeddings"], np.float32),
        classes=label_encoding.classes_or(np.asarray(values["labels"]), len(class_names)),
        confidence=np.asarray(values["confidence"], np.float32),
        labelled=np.asarray(values["is_labelled"], bool),
        true_classes=np.asarray(true_classes, np.int64)[rows],
        class_names=tuple(str(name) for name in class_names), bank_rows=int(num_rows),
        seed=int(seed))


def _cell(text):
    """A TSV cell: tabs and line breaks would split the row."""
    return " ".join(str(text).split())


def metadata_lines(sample: ProjectorSample) -> list[str]:
    """The lines of metadata.tsv (without line ends): the header `METADATA_COLUMNS`, then
    one line per sampled row, classes by name."""
    names = [_cell(name) for name in sample.class_names]
    lines = ["\t".join(METADATA_COLUMNS)]
    for i in range(len(sample.rows)):
        klass = sample.classes[i]
        lines.append("\t".join((
            names[klass] if klass >= 0 else NO_CLASS,
            "yes" if sample.labelled[i] else "no",
            f"{sample.confidence[i]:.4f}",
            names[sample.true_classes[i]] if sample.true_classes[i] >= 0 else NO_CLASS,
            str(sample.rows[i]), str(sample.examples[i]))))
    return lines


def write_projector(sample: ProjectorSample, folder: str) -> dict[str, str]:
    """Writes `FILES` into ``folder`` (which must exist); returns file name -> path."""
    from tensorboard.plugins import projector  # noqa: PLC0415 -- only when writing

    paths = {name: os.path.join(folder, name) for name in FILES}
    np.savetxt(paths[EMBEDDINGS_FILE], sample.embeddings, fmt=f"%.{FLOAT32_DIGITS}g",
               delimiter="\t")
    with open(paths[METADATA_FILE], "w", encoding="utf-8") as f:
        f.write("\n".join(metadata_lines(sample)) + "\n")
    config = projector.ProjectorConfig()
    embedding = config.embeddings.add()
    embedding.tensor_name = TENSOR_NAME
    embedding.tensor_path = EMBEDDINGS_FILE
    embedding.metadata_path = METADATA_FILE
    embedding.tensor_shape.extend(sample.embeddings.shape)
    projector.visualize_embeddings(folder, config)
    return paths
