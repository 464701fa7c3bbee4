"""A finished (or running) training run, read back from its run directory.

The tools that come after training (export, linear probe, propagation
comparison, embedding analysis) all start from a run directory written by
`llp_tf.training.run_training`:

- ``config.json`` gives the model's architecture and the dataset;
- ``split.npz`` gives the labelled and used examples;
- ``checkpoints/`` holds the model weights and the memory bank.

`load_run` rebuilds the model (and the bank of an LLP run) and restores a
checkpoint into them for inference: the model is the checkpoint item its
method exports (`Method.exported_item`: Mean Teacher's teacher); optimizer
state is not read.
"""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from llp_tf.data.sources.base import Source
from llp_tf.data.splits import regime
from llp_tf.errors import ConfigError
from llp_tf.core.memory_bank import MemoryBank
from llp_tf.models.factory import build_model_from_config
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training import run_record
from llp_tf.training.methods import method_class
from llp_tf.training.config import TrainConfig
from llp_tf.training.run_directory import (CHECKPOINT_DIR, CONFIG_FILE, SPLIT_FILE,
                                           RunDirectory, checkpoint_step)



def read_config(run_dir: str) -> TrainConfig:
    """The `TrainConfig` the run in ``run_dir`` trains with: ``config.json`` with
    the changes of its resumes applied (`run_record.current_config`).

    Raises:
      ConfigError: ``run_dir`` has no ``config.json``.
    """
    config = run_record.current_config(run_dir)
    if config is None:
        problem = "is a file" if os.path.isfile(run_dir) else f"has no {CONFIG_FILE}"
        raise ConfigError(
            f"{{run_dir}} is not a training run directory: it {problem}. Give the --run_dir "
            "of a run made by tools/train.py.", settings={"run_dir": run_dir})
    return config


def checkpoint_paths(run_dir: str) -> list[str]:
    """list of str: the run's kept checkpoints, oldest first (may be empty)."""
    return RunDirectory(run_dir).checkpoint_paths()


@dataclasses.dataclass
class TrainedRun:
    """A run's settings, split and restored state.

    Attributes:
      run_dir: str.
      config: `TrainConfig`.
      checkpoint: str, the restored checkpoint's path.
      step: int, its global step.
      model: `EmbeddingClassifier` with the weights of the checkpoint's exported item.
      bank: `MemoryBank` with the checkpoint's rows, labels, confidences and
        densities; None for the supervised baseline.
      labelled_index: int64 [M], dataset indices of the labelled examples.
      used_index: int64 [N], dataset indices of the used examples; bank row j
        is example ``used_index[j]``.
      num_classes: int, C.
    """

    run_dir: str
    config: TrainConfig
    checkpoint: str
    step: int
    model: EmbeddingClassifier
    bank: MemoryBank | None
    labelled_index: np.ndarray
    used_index: np.ndarray
    num_classes: int

    def restore(self, checkpoint: str) -> None:
        """Restores another checkpoint of the same run into the model and bank."""
        _restore(self.model, self.bank, checkpoint, _exported_item(self.config))
        self.checkpoint = checkpoint
        self.step = checkpoint_step(checkpoint)


def _exported_item(config):
    """The checkpoint item holding the model a run exports."""
    return method_class(config.method.name).exported_item


def _restore(model, bank, path, item):
    tracked = {item: model}
    if bank is not None:
        tracked["bank"] = bank
    try:
        tf.train.Checkpoint(**tracked).restore(path).expect_partial() \
            .assert_existing_objects_matched()
    except (ValueError, AssertionError, tf.errors.InvalidArgumentError,
            tf.errors.NotFoundError) as error:
        raise ConfigError(
            f"Cannot read the checkpoint {path} into the model of its run's config.json: "
            f"{error}") from None


_CATEGORY_BIAS_KEY = "{item}/category_head/bias/.ATTRIBUTES/VARIABLE_VALUE"


def _checkpoint_num_classes(path, run_dir, item):
    """C of a checkpoint: the length of the category head's bias of its model
    ``item`` (None if absent)."""
    try:
        shapes = dict(tf.train.list_variables(path))
    except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as error:
        raise ConfigError(f"Cannot read the checkpoint {path}: {error}. Give one of the run's "
                          f"checkpoints (see {run_dir}/{CHECKPOINT_DIR}), or none for the "
                          "latest.") from None
    return shapes.get(_CATEGORY_BIAS_KEY.format(item=item), [None])[0]


def load_run(run_dir: str, checkpoint: str | None = None,
             num_classes: int | None = None) -> TrainedRun:
    """Rebuilds a run's model and bank and restores a checkpoint into them.

    Args:
      run_dir: str, a directory written by `llp_tf.training.run_training`.
      checkpoint: optional str, a checkpoint path of that run; the latest by
        default.
      num_classes: optional int, C; read from the checkpoint (the length of
        the category head's bias) when None, so a run can be loaded where its
        training data is not (a transfer probe, a serving box).

    Returns:
      `TrainedRun`.

    Raises:
      ConfigError: not a run directory, no checkpoint yet, or a checkpoint
        that does not fit the saved settings.
    """
    config = read_config(run_dir)
    path = checkpoint or tf.train.latest_checkpoint(os.path.join(run_dir, CHECKPOINT_DIR))
    if path is None:
        raise ConfigError(f"The run {run_dir} has no checkpoint yet; train it first.")
    labelled_index, used_index = regime.read_split_indices(os.path.join(run_dir, SPLIT_FILE))
    item = _exported_item(config)
    if num_classes is None:
        num_classes = _checkpoint_num_classes(path, run_dir, item)
    model = build_model_from_config(config.model, num_classes, config.data.image_size)
    bank = None
    if method_class(config.method.name).keeps_bank:
        # Placeholder labels: the restore overwrites every bank variable.
        bank = MemoryBank(len(used_index), config.model.embedding_dim, num_classes,
                          regime.dense_index(used_index, labelled_index),
                          np.zeros(len(labelled_index), np.int64))
    _restore(model, bank, path, item)
    return TrainedRun(run_dir=run_dir, config=config, checkpoint=path,
                      step=checkpoint_step(path), model=model, bank=bank,
                      labelled_index=labelled_index, used_index=used_index,
                      num_classes=int(num_classes))


def open_dataset(config: TrainConfig, data_dir: str | None = None) -> Source:
    """The `Source` a run trained on (``data_dir`` replaces the run's, e.g. on
    another machine)."""
    from llp_tf.data.sources.registry import load_source  # noqa: PLC0415 -- imports TFDS

    return load_source(config.data.dataset, data_dir or config.data.data_dir)


def load_run_with_data(run_dir: str, checkpoint: str | None = None,
                       data_dir: str | None = None) -> tuple[TrainedRun, Source]:
    """(`TrainedRun`, `Source`): a run restored with the classes of its dataset.

    Args:
      run_dir: str, a run directory.
      checkpoint: optional str, one of its checkpoints (the latest by default).
      data_dir: optional str replacing the run's data_dir.
    """
    source = open_dataset(read_config(run_dir), data_dir)
    run = load_run(run_dir, checkpoint, num_classes=source.info.num_classes)
    return run, source
