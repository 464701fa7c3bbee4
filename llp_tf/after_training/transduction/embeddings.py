"""The embeddings Table 5's comparison draws from, (features float32 [N, D], true labels
int64 [N], a description dict): a run's memory bank, a split its model embeds, or .npy
files. TensorFlow is imported only to read a run."""

import os
from typing import TYPE_CHECKING, TextIO

import numpy as np

from llp_tf.errors import ConfigError, DataError
from llp_tf.tensor_types import Array
from llp_tf.training.config import TrainConfig

if TYPE_CHECKING:
    from llp_tf.after_training.run_loader import TrainedRun
    from llp_tf.data.sources.base import Source


def _load_array(path, what):
    if not os.path.isfile(path):
        raise DataError(f"The {what} file {path} does not exist.")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise DataError(f"Cannot read the {what} file {path} as a numpy .npy array "
                        f"({error}); save it with numpy.save.") from None


def features_from_files(features_path: str, labels_path: str) -> tuple[Array, Array, dict]:
    """(features float [N, D], labels int64 [N], description dict) from .npy files."""
    features = _load_array(features_path, "features")
    labels = _load_array(labels_path, "labels")
    if features.ndim != 2 or not np.issubdtype(features.dtype, np.number):
        raise DataError(f"{features_path} must hold a numeric [N, D] array; it holds "
                        f"{features.dtype} {features.shape}.")
    if labels.ndim != 1 or len(labels) != len(features):
        raise DataError(f"{labels_path} must hold one label per feature row ([{len(features)}]"
                        f"); it holds {labels.shape}.")
    if not np.issubdtype(labels.dtype, np.integer):
        if not (np.issubdtype(labels.dtype, np.floating) and np.all(labels == np.round(labels))):
            raise DataError(f"{labels_path} must hold integer classes; it holds "
                            f"{labels.dtype}.")
    return (features.astype(np.float32), labels.astype(np.int64),
            {"features": os.path.abspath(features_path), "labels": os.path.abspath(labels_path)})


def embed_split(run: "TrainedRun", source: "Source", split: str, batch_size: int,
                stream: TextIO | None) -> tuple[Array, Array]:
    """(embeddings float32 [n, D], true labels int64 [n]) of a split, in index order."""
    from llp_tf.after_training.features import extract_features

    embedded = extract_features(run.model, source, split, run.config.data.image_size,
                                batch_size, stream, output="embedding")
    return embedded.features, embedded.labels


def features_from_run(run_dir: str, checkpoint: str | None, split: str | None,
                      data_dir: str | None, batch_size: int, stream: TextIO | None
                      ) -> tuple[Array, Array, dict, TrainConfig]:
    """(features, labels, description, run config) of a run's bank or, with ``split``, that
    split embedded by the model at ``checkpoint`` (a step or a path; None: the latest)."""
    from llp_tf.after_training import run_loader
    from llp_tf.training.methods import method_class
    from llp_tf.training.run_directory import resolve_checkpoint

    config = run_loader.read_config(run_dir)
    if split is None and not method_class(config.method.name).keeps_bank:
        raise ConfigError(f"The run {run_dir} ({config.method.name}) has no memory bank; pass "
                          "--embed_split=train or --embed_split=validation to embed images "
                          "with its model.")
    run, source = run_loader.load_run_with_data(
        run_dir, resolve_checkpoint(run_dir, checkpoint), data_dir)
    description = {"run_dir": os.path.abspath(run_dir), "checkpoint": run.checkpoint,
                   "step": run.step, "dataset": config.data.dataset}
    if split is not None:
        features, labels = embed_split(run, source, split, batch_size, stream)
        description["embeddings"] = f"{split} split embedded by the model"
        return features, labels, description, config
    labels = source.train_labels()[run.used_index]
    description["embeddings"] = "memory bank (true training labels)"
    return run.bank["embeddings"], labels, description, config
