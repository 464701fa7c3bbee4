"""The run directory: its layout, the checkpoint's items, and the metrics file.

A run lives in one directory, written by training and read by every tool:

- ``config.json``: the resolved settings (`llp_tf.training.config`);
- ``split.npz``: the labelled / used split, drawn once (`llp_tf.data.splits`);
- ``checkpoints/``: `tf.train.Checkpoint`s of all training state, numbered by
  global step, the newest ``keep`` of them kept;
- ``metrics.jsonl``: one JSON object per evaluation;
- ``tensorboard/``: ``train/...`` and ``eval/...`` scalars.

The checkpoint's items are named ``model``, ``optimizer``, ``step`` and
``plateau`` for every method, plus what the method adds (LLP: ``bank`` and
``density_epoch``). Those names are the checkpoint format: a run written by
an earlier version resumes and exports as long as they stay.
"""

import json
import os
from typing import Any, Mapping, Optional

import tensorflow as tf

from llp_tf.errors import DataError

CONFIG_FILE = "config.json"
SPLIT_FILE = "split.npz"
CHECKPOINT_DIR = "checkpoints"
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


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

    def checkpoint_manager(self, items: Mapping[str, Any], keep: int
                           ) -> tf.train.CheckpointManager:
        """A `tf.train.CheckpointManager` of a checkpoint of ``items``.

        Args:
          items: dict of item name -> trackable (see the module docstring).
          keep: int, checkpoints kept.
        """
        return tf.train.CheckpointManager(tf.train.Checkpoint(**items), self.checkpoint_dir,
                                          max_to_keep=keep)

    def latest_checkpoint(self) -> Optional[str]:
        """str or None: the newest checkpoint's path."""
        return tf.train.latest_checkpoint(self.checkpoint_dir)

    def checkpoint_paths(self) -> list[str]:
        """list of str: the kept checkpoints, oldest first (may be empty)."""
        state = tf.train.get_checkpoint_state(self.checkpoint_dir)
        return [] if state is None else list(state.all_model_checkpoint_paths)

    def append_metrics(self, row: Mapping[str, Any]) -> None:
        """Appends one evaluation's dict of metrics as a JSON line."""
        os.makedirs(self.path, exist_ok=True)
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(row) + "\n")

    def read_metrics(self) -> list[dict]:
        """list of dict: the metrics file's rows in order ([] if there is none).

        Raises:
          DataError: a line that is not JSON (the file was damaged).
        """
        if not os.path.isfile(self.metrics_path):
            return []
        rows = []
        with open(self.metrics_path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise DataError(
                        f"Line {number} of {self.metrics_path} is not JSON ({error}); the file "
                        "was damaged. Delete the line to read the rest.") from None
        return rows


def checkpoint_step(path: str) -> int:
    """int: the global step a checkpoint path was saved at (its number)."""
    return int(path.rsplit("-", 1)[-1])
