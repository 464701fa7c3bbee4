"""A training run read back from its run directory for inference: `load_run` rebuilds the
model (the item its method exports: Mean Teacher's teacher) and restores a checkpoint into it
(no optimizer state); the bank of a method that keeps one is read from the checkpoint only
as far as its reader asks (`StoredBank`)."""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from llp_tf.data.sources.base import Source
from llp_tf.data.splits import regime
from llp_tf.errors import ConfigError
from llp_tf.after_training.stored_bank import StoredBank
from llp_tf.models.factory import build_model_from_config
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training import run_record
from llp_tf.training.methods import method_class
from llp_tf.training.config import TrainConfig
from llp_tf.training.run_directory import (CHECKPOINT_DIR, CONFIG_FILE, SPLIT_FILE,
                                           RunDirectory, checkpoint_step)
from llp_tf.tool_names import tool



def read_config(run_dir: str) -> TrainConfig:
    """The `TrainConfig` of ``run_dir`` with its resumes' changes; ConfigError: no
    ``config.json``."""
    config = run_record.current_config(run_dir)
    if config is None:
        problem = "is a file" if os.path.isfile(run_dir) else f"has no {CONFIG_FILE}"
        raise ConfigError(
            f"{{run_dir}} is not a training run directory: it {problem}. Give the --run_dir "
            f"of a run made by {tool('train')}.", settings={"run_dir": run_dir})
    return config


def checkpoint_paths(run_dir: str) -> list[str]:
    """list of str: the run's kept checkpoints, oldest first (may be empty)."""
    return RunDirectory(run_dir).checkpoint_paths()


@dataclasses.dataclass
class TrainedRun:
    """A run's settings, split (``labelled_index`` int64 [M], ``used_index`` int64 [N]: bank
    row j is example ``used_index[j]``), restored model, and `StoredBank` of its checkpoint
    (None without one)."""

    run_dir: str
    config: TrainConfig
    checkpoint: str
    step: int
    model: EmbeddingClassifier
    bank: StoredBank | None
    labelled_index: np.ndarray
    used_index: np.ndarray
    num_classes: int

    def restore(self, checkpoint: str) -> None:
        """Restores another checkpoint of the same run into the model, and reads its bank."""
        _restore(self.model, checkpoint, _exported_item(self.config))
        if self.bank is not None:
            self.bank = StoredBank(checkpoint, self.used_index)
        self.checkpoint = checkpoint
        self.step = checkpoint_step(checkpoint)


def _exported_item(config):
    return method_class(config.method.name).exported_item


def _restore(model, path, item):
    try:
        tf.train.Checkpoint(**{item: model}).restore(path).expect_partial() \
            .assert_existing_objects_matched()
    except (ValueError, AssertionError, tf.errors.InvalidArgumentError,
            tf.errors.NotFoundError) as error:
        raise ConfigError(
            f"Cannot read the checkpoint {path} into the model of its run's config.json: "
            f"{error}") from None


_CATEGORY_BIAS_KEY = "{item}/category_head/bias/.ATTRIBUTES/VARIABLE_VALUE"


def _checkpoint_num_classes(path, run_dir, item):
    """C of a checkpoint: the length of its category head's bias (None if absent)."""
    try:
        shapes = dict(tf.train.list_variables(path))
    except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as error:
        raise ConfigError(f"Cannot read the checkpoint {path}: {error}. Give one of the run's "
                          f"checkpoints (see {run_dir}/{CHECKPOINT_DIR}), or none for the "
                          "latest.") from None
    return shapes.get(_CATEGORY_BIAS_KEY.format(item=item), [None])[0]


def load_run(run_dir: str, checkpoint: str | None = None,
             num_classes: int | None = None, with_bank: bool = True) -> TrainedRun:
    """`TrainedRun` of ``run_dir`` at ``checkpoint`` (default the latest); ``num_classes``
    defaults to the checkpoint's, so no dataset is needed. ``with_bank=False``: the bank is not
    opened (its ``bank`` is None), whatever the method.

    Raises:
      ConfigError: not a run directory, no checkpoint yet, or a checkpoint that does not
        fit the saved settings.
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
    _restore(model, path, item)
    bank = None
    if with_bank and method_class(config.method.name).keeps_bank:
        bank = StoredBank(path, used_index)
    return TrainedRun(run_dir=run_dir, config=config, checkpoint=path,
                      step=checkpoint_step(path), model=model, bank=bank,
                      labelled_index=labelled_index, used_index=used_index,
                      num_classes=int(num_classes))


def open_dataset(config: TrainConfig, data_dir: str | None = None) -> Source:
    """The `Source` a run trained on (``data_dir`` replaces the run's)."""
    from llp_tf.data.sources.registry import load_source  # noqa: PLC0415

    return load_source(config.data.dataset, data_dir or config.data.data_dir)


def load_run_with_data(run_dir: str, checkpoint: str | None = None,
                       data_dir: str | None = None,
                       with_bank: bool = True) -> tuple[TrainedRun, Source]:
    """(`TrainedRun`, `Source`): a run restored with the classes of its dataset (``with_bank``
    as `load_run`)."""
    source = open_dataset(read_config(run_dir), data_dir)
    run = load_run(run_dir, checkpoint, num_classes=source.info.num_classes,
                   with_bank=with_bank)
    return run, source
