"""The run directory: its layout (docs/training.md, "The run directory"), the checkpoint's
items and the metrics file, read back without TensorFlow (`read_metrics`).

The checkpoint's items: ``model``, ``optimizer``, ``step``, ``plateau`` and ``epoch_totals``
for every method, and what the method adds (LLP: ``bank`` and ``density_epoch``)."""

import glob
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

#: Metric names of ``metrics.jsonl`` before the rule of `llp_tf.training.metrics` -> today's.
#: (An old ``train_confidence``, a mean over every row, stays as written.)
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
    """A metrics row under today's names: an old row (told by its other old names, every one has
    ``top1``; ``categorisation`` is in both) renamed by `RENAMED`, a new one as it is."""
    if not any(name in RENAMED and name != "categorisation" for name in row):
        return dict(row)
    return {RENAMED.get(name, name): value for name, value in row.items()}


#: What training writes in a run directory, beside its lock.
TRAINING_RECORD = (CONFIG_FILE, HISTORY_FILE, SPLIT_FILE, CHECKPOINT_DIR, METRICS_FILE,
                   TENSORBOARD_DIR)


class RunDirectory:
    """Paths of one run directory (``path``, str; need not exist yet) and its metrics file."""

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
        """Whether ``config.json`` is a training run's record: "run_dir" in its "run" section and
        "dataset" in its "data" section."""
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
        """Writes ``text`` to ``name`` via a temporary file: a crash leaves old or new."""
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

        Raises:
          DataError: a line that is not JSON, unless it is the last and ``drop_torn_last_line``."""
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
        """The metrics rows under today's names (`current_names`); as `read_json_lines`."""
        return [current_names(row) for row in
                self.read_json_lines(METRICS_FILE, drop_torn_last_line=drop_torn_last_line)]

    def drop_records_after(self, step: int) -> int:
        """Drops the metrics rows (and a torn last line) and TensorBoard events past global step
        ``step``, which a resumed run records again; returns the metrics rows dropped."""
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
    """Whether the run in ``run_dir`` starts afresh, and the one-line notice saying so (or None).

    It does with ``overwrite``, or when the directory holds a record but no checkpoint (a failed
    start). The chief deletes the record: all of it with ``overwrite``, else all but
    ``checkpoints/``.

    Raises:
      ConfigError: files of `TRAINING_RECORD`'s names but no training run's config.json."""
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
    """Rewrites an event file without its summaries past ``step`` or a torn last record."""
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


def checkpoint_files(prefix: str) -> list[str]:
    """The files of the checkpoint ``prefix`` (its index and data files), sorted."""
    return sorted(glob.glob(prefix + ".index") + glob.glob(prefix + ".data-*"))


def checkpoint_step(path: str) -> int:
    """int: the global step a checkpoint path was saved at (its number)."""
    return int(path.rsplit("-", 1)[-1])


def resolve_checkpoint(run_dir: str, checkpoint: Optional[str]) -> Optional[str]:
    """A --checkpoint value (None, a step number or a path) as a path of the run's, or None.

    Raises:
      ConfigError: a step without a kept checkpoint, or a path that is not a checkpoint."""
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
    if not os.path.isfile(checkpoint + ".index"):
        raise ConfigError(f"{checkpoint} is not a checkpoint (there is no "
                          f"{checkpoint}.index); give a path from {run_dir}/checkpoints "
                          "without its extension, or a step number.")
    return checkpoint
