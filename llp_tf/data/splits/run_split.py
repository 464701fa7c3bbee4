"""A training run's split (`RunSplit`): the run's saved split, else one made from a split
file, a labelled-set list or a new draw (`resolve`); `prepare` also checks a new one and
saves it as the run's split file."""

import dataclasses
import os
from collections.abc import Callable
import numpy as np

from llp_tf.counted_nouns import counted
from llp_tf.data.config import DataConfig
from llp_tf.data.sources.base import VALIDATION, Source
from llp_tf.data.splits import exclusions, image_check, label_subsets, regime
from llp_tf.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class RunSplit:
    """The run's examples: ``labelled_index`` int64 [M] and ``used_index`` int64 [U] (bank row j is
    example ``used_index[j]``), dataset indices; ``train_labels`` int64 [N], every training
    example's class; ``excluded_validation`` int64 [E], validation examples never evaluated."""

    labelled_index: np.ndarray
    used_index: np.ndarray
    train_labels: np.ndarray
    excluded_validation: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(0, np.int64))


def _made_split(data, source, train_labels, excluded, log):
    """(labelled_index, used_index, made_from) of a split file, a subset list or a new draw."""
    made_from = {"label_subset": None, "exclude_list": excluded.record()}
    name = source.info.name
    if data.split_file:
        labelled_index, used_index = (np.setdiff1d(index, excluded.train) for index in
                                      regime.load_splits(data.split_file, train_labels, name))
        log(f"Split from {data.split_file}.")
    elif data.label_subset:
        labelled_index, used_index, list_path = label_subsets.make_subset_splits(
            source, data.label_subset, data.data_percent, data.split_seed, data.data_dir,
            excluded.train)
        made_from["label_subset"] = label_subsets.list_record(data.label_subset, list_path)
        log(f"Labelled set: the {counted(len(labelled_index), 'image')} listed in {list_path}"
            f"{' and not excluded' if excluded.train.size else ''} "
            "(--label_percent is not used).")
    else:
        labelled_index, used_index = regime.make_splits(
            train_labels, data.label_percent, data.data_percent, seed=data.split_seed,
            num_classes=source.info.num_classes, excluded=excluded.train)
    return labelled_index, used_index, made_from


def _resolve(data, split_path, source, train_labels, excluded, afresh, log):
    """(labelled_index, used_index, made_from) of `resolve`."""
    if os.path.exists(split_path) and not afresh:
        exclusions.check_resume(split_path, excluded)
        return (*regime.load_splits(split_path, train_labels, source.info.name), None)
    warning = regime.absent_classes_warning(train_labels, source.info.num_classes)
    if warning:
        log(warning)
    return _made_split(data, source, train_labels, excluded, log)


def resolve(data: DataConfig, split_path: str, source: Source, afresh: bool,
            log: Callable[[str], None]) -> RunSplit:
    """The split saved at ``split_path`` unless the run starts ``afresh``, else one made as
    ``data`` says (a split file, a labelled-set list or a new draw) without its exclude list's
    examples; notes go to ``log``."""
    train_labels = source.train_labels()
    excluded = exclusions.load(data.exclude_list, source)
    labelled_index, used_index, _ = _resolve(data, split_path, source, train_labels, excluded,
                                             afresh, log)
    return RunSplit(labelled_index, used_index, train_labels, excluded.validation)


def check_one_batch(num_used: int, global_batch_size: int) -> None:
    """ConfigError: ``num_used`` examples make no global batch, so an epoch has no step."""
    if num_used < global_batch_size:
        raise ConfigError(
            f"The run uses {counted(num_used, 'training example')}, fewer than one global batch "
            f"(--global_batch_size={global_batch_size}), so an epoch would have no step. "
            f"Give --global_batch_size={num_used} or less, or use more data "
            "(--data_percent, or a larger dataset).")


def prepare(data: DataConfig, split_path: str, source: Source, global_batch_size: int,
            afresh: bool, save: bool, log: Callable[[str], None]) -> RunSplit:
    """The run's split as `resolve`, the same on every worker; a new one is checked (a global
    batch, decodable validation images) and, if ``save``, written to ``split_path``."""
    train_labels = source.train_labels()
    excluded = exclusions.load(data.exclude_list, source)
    labelled_index, used_index, made_from = _resolve(data, split_path, source, train_labels,
                                                     excluded, afresh, log)
    check_one_batch(len(used_index), global_batch_size)
    if made_from is not None:
        image_check.require_decodable(source, VALIDATION, excluded.validation)
    if made_from is not None and save:
        regime.save_splits(split_path, labelled_index, used_index, train_labels,
                           source.info.name, data.label_percent, data.data_percent,
                           data.split_seed, made_from,
                           {"train": excluded.train, "validation": excluded.validation})
    return RunSplit(labelled_index, used_index, train_labels, excluded.validation)
