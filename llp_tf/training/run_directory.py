"""The run directory: its layout, the checkpoint's items, and the metrics file.

A run lives in one directory, written by training and read by every tool
(the files: docs/training.md, "The run directory"): ``run.lock`` (`run_lock`),
``config.json`` and ``config_history.jsonl`` (`run_record`), ``split.npz``
(`llp_tf.data.splits.regime`), ``checkpoints/`` (numbered by global step, the
newest ``keep`` kept), ``metrics.jsonl`` (one JSON object per evaluation)
and ``tensorboard/``. A resumed run first drops the metrics rows and
TensorBoard events past the step it resumes from
(`RunDirectory.drop_records_after`), so every epoch appears once. The
metrics file is read back under today's metric names (`read_metrics`,
`RENAMED`), without TensorFlow: a tool that only reads metrics (e.g.
``tools/compare_methods.py``) does not load it.

The checkpoint's items: ``model``, ``optimizer``, ``step``, ``plateau`` and
``epoch_totals`` (the running sums of the epoch's training metrics) for every
method, and what the method adds (LLP: ``bank`` and ``density_epoch``).
"""

import json
import os
import shutil
from typing import Any, Mapping, Optional

from llp_tf.counted_nouns import listed
from llp_tf.errors import ConfigError, DataError
from llp_tf.training.run_lock import LOCK_FILE

CONFIG_FILE = "config.json"
SPLIT_FILE = "split.npz"
CHECKPOINT_DIR = "checkpoints"
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
HISTORY_FILE = "config_history.jsonl"

#: Metric names written to ``metrics.jsonl`` by earlier versions -> today's
#: (the rule of `llp_tf.training.metrics`): validation metrics were unprefixed
#: and training means prefixed ``train_``. ``read_metrics`` renames them, so
#: runs made before the rule read back under it. Left as written:
#: ``train_confidence``, a mean over every row (rows without a class at
#: confidence 1), not the mean over the rows with a class that ``confidence``
#: is; the names that kept their meaning and name (``epoch``, ``step``,
#: ``phase``, ``learning_rate``, ``aggregation_score``, ``pseudo_label_*``:
#: an old warm-up row keeps the zeros it logged for the last).
RENAMED = {
    "top1": "val_top1", "top5": "val_top5", "categorisation": "val_categorisation",
    "nn_top1": "val_nn_top1", "examples": "val_examples",
    "student_top1": "val_student_top1", "student_top5": "val_student_top5",
    "student_categorisation": "val_student_categorisation",
    "student_examples": "val_student_examples",
    "train_loss": "loss", "train_aggregation": "aggregation",
    "train_categorisation": "categorisation", "train_weight_decay": "weight_decay",
    "train_pseudo_labelled": "pseudo_labelled", "train_consistency": "consistency",
    "train_consistency_weight": "consistency_weight", "train_ema_decay": "ema_decay",
    "train_labelled": "labelled", "train_unlabelled": "unlabelled",
    "train_unlabelled_weight": "unlabelled_weight", "train_mask": "mask",
}


def current_names(row: Mapping[str, Any]) -> dict[str, Any]:
    """A metrics row under today's names: a row written before them renamed by
    `RENAMED`; a row written since returned as it is.

    ``categorisation`` is the one name of both: today's training term, and
    an old row's validation cross-entropy. An old row is told by its other
    old names (every old row has ``top1``)."""
    if not any(name in RENAMED and name != "categorisation" for name in row):
        return dict(row)
    return {RENAMED.get(name, name): value for name, value in row.items()}


#: What training writes in a run directory, beside its lock.
TRAINING_RECORD = (CONFIG_FILE, HISTORY_FILE, SPLIT_FILE, CHECKPOINT_DIR, METRICS_FILE,
                   TENSORBOARD_DIR)


class RunDirectory:
    """Paths of one run directory and its metrics file.

    Args:
      path: str, the run directory (need not exist yet).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(path)

    def file(self, name: str) -> str:
        """str: ``name`` inside the run directory."""
        return os.path.join(self.path, name)

    @property
    def config_path(self) -> str:
        return self.file(CONFIG_FILE)

    @property
    def split_path(self) -> str:
        return self.file(SPLIT_FILE)

    @property
    def checkpoint_dir(self) -> str:
        return self.file(CHECKPOINT_DIR)

    @property
    def metrics_path(self) -> str:
        return self.file(METRICS_FILE)

    @property
    def tensorboard_dir(self) -> str:
        return self.file(TENSORBOARD_DIR)

    def latest_checkpoint(self) -> Optional[str]:
        """str or None: the newest checkpoint's path."""
        import tensorflow as tf  # noqa: PLC0415 -- see the module docstring
        return tf.train.latest_checkpoint(self.checkpoint_dir)

    def checkpoint_paths(self) -> list[str]:
        """list of str: the kept checkpoints, oldest first (may be empty)."""
        import tensorflow as tf  # noqa: PLC0415 -- see the module docstring
        state = tf.train.get_checkpoint_state(self.checkpoint_dir)
        return [] if state is None else list(state.all_model_checkpoint_paths)

    def training_record(self) -> list[str]:
        """The names of `TRAINING_RECORD` the directory holds, in that order."""
        return [name for name in TRAINING_RECORD if os.path.exists(self.file(name))]

    def holds_settings(self) -> bool:
        """Whether ``config.json`` is a training run's record of its settings: a
        JSON object naming the run directory and the dataset ("run_dir" in its
        "run" section and "dataset" in its "data" section)."""
        try:
            with open(self.config_path) as f:
                record = json.load(f)
        except (OSError, ValueError):
            return False
        if not isinstance(record, dict):
            return False
        run, data = record.get("run"), record.get("data")
        return isinstance(run, dict) and isinstance(data, dict) and "run_dir" in run \
            and "dataset" in data

    def delete(self, names: list[str]) -> None:
        """Deletes the files and folders ``names`` of the directory."""
        for name in names:
            path = self.file(name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)

    def write_atomically(self, name: str, text: str) -> None:
        """Writes ``text`` to ``name`` through a temporary file in the run directory,
        so a crash leaves the old file or the new one, never half of one."""
        os.makedirs(self.path, exist_ok=True)
        path = self.file(name)
        temporary = f"{path}.tmp-{os.getpid()}"
        with open(temporary, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)

    def append_json_line(self, name: str, row: Mapping[str, Any]) -> None:
        """Appends ``row`` to the JSON-lines file ``name``."""
        os.makedirs(self.path, exist_ok=True)
        with open(self.file(name), "a") as f:
            f.write(json.dumps(row) + "\n")

    def read_json_lines(self, name: str, *, drop_torn_last_line: bool = False) -> list[dict]:
        """The rows of the JSON-lines file ``name`` in order ([] if it does not exist).

        Args:
          drop_torn_last_line: skip a last line that is not JSON (a write cut
            off by a crash) instead of raising.

        Raises:
          DataError: a line that is not JSON (the file was damaged).
        """
        path = self.file(name)
        if not os.path.isfile(path):
            return []
        with open(path) as f:
            lines = [(number, line) for number, line in enumerate(f, 1) if line.strip()]
        rows = []
        for position, (number, line) in enumerate(lines):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                if drop_torn_last_line and position == len(lines) - 1:
                    break
                raise DataError(
                    f"Line {number} of {path} is not JSON ({error}); the file was "
                    "damaged. Delete the line to read the rest.") from None
        return rows

    def append_metrics(self, row: Mapping[str, Any]) -> None:
        """Appends one evaluation's dict of metrics as a JSON line."""
        self.append_json_line(METRICS_FILE, row)

    def read_metrics(self, *, drop_torn_last_line: bool = False) -> list[dict]:
        """list of dict: the metrics file's rows in order, under today's metric
        names (`current_names`); [] if there is none.

        Args:
          drop_torn_last_line: as `read_json_lines`' (a run killed mid-write).

        Raises:
          DataError: a line that is not JSON (the file was damaged).
        """
        return [current_names(row) for row in
                self.read_json_lines(METRICS_FILE, drop_torn_last_line=drop_torn_last_line)]

    def drop_records_after(self, step: int) -> int:
        """Forgets what was recorded past global step ``step``, the step a run
        resumes from: metrics rows and TensorBoard events of work whose
        checkpoint was lost, so that the resumed run records each step once.
        Also drops a metrics line torn by a crash. Returns the metrics rows dropped.
        """
        rows = self.read_json_lines(METRICS_FILE, drop_torn_last_line=True)
        kept = [row for row in rows if int(row["step"]) <= step]
        if os.path.isfile(self.metrics_path):
            self.write_atomically(METRICS_FILE, "".join(json.dumps(row) + "\n"
                                                        for row in kept))
        for folder, _, names in os.walk(self.tensorboard_dir):
            for name in names:
                if name.startswith("events."):
                    _trim_event_file(os.path.join(folder, name), step)
        return len(rows) - len(kept)


def start_afresh(run_dir: str, overwrite: bool, chief: bool) -> tuple[bool, Optional[str]]:
    """Whether the run in ``run_dir`` starts afresh instead of from its record, and
    the one-line notice saying so (None when it does not).

    It does when ``overwrite`` asks, or when the directory holds a record but no
    checkpoint: a start that failed before its first, whose settings a retry
    may change. The chief deletes the old record; with ``overwrite`` all of it,
    otherwise all but the checkpoint folder (which may hold damaged ones).
    Only a training run's record is deleted: one whose ``config.json`` holds
    a run's settings (`RunDirectory.holds_settings`).

    Raises:
      ConfigError: the directory holds files of `TRAINING_RECORD`'s names that
        would be deleted, but no config.json of a training run.
    """
    directory = RunDirectory(run_dir)
    present = directory.training_record()
    if not present or (directory.checkpoint_paths() and not overwrite):
        return False, None
    if not directory.holds_settings():
        refused = "--overwrite does not delete them" if overwrite else "a run does not start there"
        raise ConfigError(f"{run_dir} holds {listed(present)} but is not a training run (no "
                          f"config.json with a run's settings), so {refused}: choose another "
                          "--run_dir.")
    deleted = present if overwrite else [name for name in present if name != CHECKPOINT_DIR]
    if not chief:
        return True, None
    directory.delete(deleted)
    names = ", ".join(deleted)
    if not overwrite:
        return True, (f"{run_dir} holds no checkpoint (its start did not reach the first), so "
                      f"the run starts afresh; deleted its {names}.")
    left = sorted(set(os.listdir(run_dir)) - set(TRAINING_RECORD) - {LOCK_FILE})
    return True, (f"--overwrite: deleted the run's {names} in {run_dir}; it starts afresh." +
                  (f" Left as they were: {', '.join(left)}." if left else ""))


def _trim_event_file(path: str, step: int) -> None:
    """Rewrites a TensorBoard event file without its summaries past ``step`` (and
    without a last record torn by a crash); leaves it alone if nothing goes."""
    import tensorflow as tf  # noqa: PLC0415 -- see the module docstring
    records = []
    try:
        for record in tf.data.TFRecordDataset(path):
            records.append(record.numpy())
    except tf.errors.DataLossError:
        pass  # a torn last record
    kept = [r for r in records if not _is_summary_after(r, step)]
    if len(kept) == len(records) and os.path.getsize(path) == sum(
            len(r) + 16 for r in records):
        return
    temporary = path + ".trimmed"
    with tf.io.TFRecordWriter(temporary) as writer:
        for record in kept:
            writer.write(record)
    os.replace(temporary, path)


def _is_summary_after(record: bytes, step: int) -> bool:
    import tensorflow as tf  # noqa: PLC0415 -- see the module docstring
    event = tf.compat.v1.Event.FromString(record)
    return event.HasField("summary") and event.step > step


def checkpoint_step(path: str) -> int:
    """int: the global step a checkpoint path was saved at (its number)."""
    return int(path.rsplit("-", 1)[-1])


def resolve_checkpoint(run_dir: str, checkpoint: Optional[str]) -> Optional[str]:
    """A --checkpoint value (None, a step number or a path) as a checkpoint path of the
    run in ``run_dir``, or None.

    Raises:
      ConfigError: a step the run has no kept checkpoint of, or a path that
        is not a checkpoint.
    """
    if checkpoint is None:
        return None
    if checkpoint.isdigit():
        by_step = {checkpoint_step(path): path
                   for path in RunDirectory(run_dir).checkpoint_paths()}
        if int(checkpoint) not in by_step:
            kept = ", ".join(str(step) for step in sorted(by_step)) or "none"
            raise ConfigError(f"The run {run_dir} has no checkpoint at step {checkpoint}; "
                              f"its kept checkpoints are at steps: {kept}.")
        return by_step[int(checkpoint)]
    # A checkpoint is a prefix: its files are PATH.index and PATH.data-*.
    if not os.path.isfile(checkpoint + ".index"):
        raise ConfigError(f"{checkpoint} is not a checkpoint (there is no "
                          f"{checkpoint}.index); give a path from {run_dir}/checkpoints "
                          "without its extension, or a step number.")
    return checkpoint
