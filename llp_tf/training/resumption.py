"""How a run (re)starts: from its newest readable checkpoint (one written before the step's
metrics were typed too: `OLD_RATIOS`), else as its method initialises a new run (`start`);
then, on a rerun, the records past the restored step dropped, nothing done when no epoch is
left to train, and changed settings recorded (`settle_records`)."""

from collections.abc import Callable

import tensorflow as tf

from llp_tf.counted_nouns import counted
from llp_tf.training import run_record
from llp_tf.training.checkpoints import RunCheckpoints
from llp_tf.training.config import TrainConfig
from llp_tf.training.epoch_totals import EpochTotals
from llp_tf.training.methods.base import Method
from llp_tf.training.run_directory import RunDirectory
from llp_tf.training.step_metrics import Mean

#: The checkpoint item of the run's `EpochTotals` (`assembly`).
TOTALS_ITEM = "epoch_totals"
#: The subset means that checkpoints written before `step_metrics` (issue 48) kept as two
#: batch means of the step, a ratio: name -> (its numerator, its rows' share). Such a
#: checkpoint's totals restore into the subset mean's (`_OldTotals`).
OLD_RATIOS = {"confidence": ("confidence_sum", "pseudo_labelled")}


class _OldTotals:
    """Restores the `EpochTotals` of a checkpoint that keeps `OLD_RATIOS` in place of
    ``totals`` (`stand_ins`), then moves them in (`move`): a subset mean's sums and count are
    its numerator's, its weights its rows' share's sums."""

    def __init__(self, totals: EpochTotals) -> None:
        self.totals = totals
        self.read: dict[str, tuple[list[str], EpochTotals]] = {}

    def stand_ins(self, path: str) -> dict[str, EpochTotals]:
        """{`TOTALS_ITEM`: totals of the old names} for an old checkpoint, else {}."""
        keys = {key for key, _ in tf.train.list_variables(path)}
        old = [name for name in self.totals.weights if name in OLD_RATIOS
               and f"{TOTALS_ITEM}/weights/{name}/.ATTRIBUTES/VARIABLE_VALUE" not in keys]
        if not old:
            return {}
        names = (set(self.totals.sums) - set(old)).union(*(OLD_RATIOS[name] for name in old))
        self.read[path] = old, EpochTotals([dict.fromkeys(names, Mean)])
        return {TOTALS_ITEM: self.read[path][1]}

    def move(self, path: str) -> None:
        """Sets the totals from the old ones read from ``path``, if it is an old checkpoint."""
        if path not in self.read:
            return
        old, read = self.read[path]
        for name in self.totals.sums:
            source = OLD_RATIOS[name][0] if name in old else name
            self.totals.sums[name].assign(read.sums[source])
            self.totals.counts[name].assign(read.counts[source])
        for name in old:
            self.totals.weights[name].assign(read.sums[OLD_RATIOS[name][1]])


def start(checkpoints: RunCheckpoints, step: tf.Variable, totals: EpochTotals, method: Method,
          steps_per_epoch: int, afresh: bool, log: Callable[[str], None]) -> bool:
    """Restores the newest readable checkpoint (unless ``afresh``) with the epoch's
    ``totals``, else lets ``method`` initialise a new run (setting ``step``); returns whether
    it resumed."""
    old_totals = _OldTotals(totals)
    restored = None if afresh else checkpoints.restore_latest(old_totals.stand_ins)
    if restored:
        old_totals.move(restored)
        log(f"Resumed from {restored} (step {int(step.numpy())}).")
        return True
    started = method.initialise(steps_per_epoch)
    if started:
        step.assign(started[0])
        log(started[1])
    return False


def _nothing_to_do(run_dir, epochs, step, steps_per_epoch):
    """The message of a rerun that asks for no more epochs than the run has trained."""
    done = step // steps_per_epoch
    metrics = RunDirectory(run_dir).metrics_path
    if done == epochs:
        return (f"The run in {run_dir} has trained the {counted(done, 'epoch')} asked "
                f"(step {step}); nothing to do. Its metrics are in {metrics}; raise --epochs to "
                "train further.")
    return (f"The run in {run_dir} has trained {counted(done, 'epoch')} (step {step}), "
            f"more than the {epochs} asked (--epochs={epochs}); nothing was trained or changed. "
            f"Its metrics are in {metrics}; give --epochs above {done} to train further.")


def settle_records(config: TrainConfig, resumed: bool, step: int, steps_per_epoch: int,
                   chief: bool, log: Callable[[str], None]) -> bool:
    """On the chief, drops the records past the ``step`` a run ``resumed`` from and records the
    settings ``config`` changes; False (nothing recorded) when no epoch is left to train."""
    run_directory = RunDirectory(config.run_dir)
    if resumed and chief:
        dropped = run_directory.drop_records_after(step)
        if dropped:
            log(f"Dropped {counted(dropped, 'metrics row')} recorded after step {step}, whose "
                "checkpoint was lost; they are recomputed.")
    epochs = config.optimization.epochs
    if step // steps_per_epoch >= epochs:
        log(_nothing_to_do(config.run_dir, epochs, step, steps_per_epoch))
        return False
    changed = run_record.record_changes(config, step) if chief else {}
    if changed:
        log(f"Settings changed since the run last trained: {run_record.format_changes(changed)}; "
            f"recorded at step {step} in {run_directory.file(run_record.HISTORY_FILE)}.")
    return True
