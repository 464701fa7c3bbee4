"""The run's checkpoints, restored past damaged files (moved to ``checkpoints/damaged/``) and
saved as TensorFlow does, without losing the previous one. Only the chief writes the run's;
other workers save into a scratch folder, but for the rows of a bank sharded across workers,
which each worker writes itself and the chief merges (`sliced_checkpoint`). docs/training.md,
"The run directory"; docs/multi-worker.md."""

from __future__ import annotations

import os
import re
import shutil
from typing import Any, Callable, Mapping, Optional, TextIO

import keras
import tensorflow as tf

from llp_tf.core.bank_slices import SlicedState
from llp_tf.errors import ConfigError, LLPError
from llp_tf.training import sliced_checkpoint
from llp_tf.training.cluster import Workers
from llp_tf.training.run_directory import RunDirectory, checkpoint_files

DAMAGED_DIR = "damaged"

_READ_ERRORS = (IndexError, tf.errors.DataLossError, tf.errors.NotFoundError,
                tf.errors.OutOfRangeError, OSError)


class CheckpointDamaged(LLPError):
    """No kept checkpoint of the run can be read."""


class CheckpointWriteFailed(LLPError):
    """A checkpoint could not be written (the previous ones are intact)."""


class RunCheckpoints:
    """A run's `tf.train.Checkpoint` of ``items`` (name -> trackable) and its kept checkpoints.

    Args:
      run_directory: `RunDirectory`; keep: int, checkpoints kept; stream: where warnings go.
      scratch_dir: a non-chief worker's folder for its saves; None for the chief.
      workers: this process's `Workers` in a cluster, None for one process: across workers,
        each writes the `SlicedState`s of ``items`` itself."""

    def __init__(self, items: Mapping[str, Any], run_directory: RunDirectory, keep: int,
                 stream: TextIO, scratch_dir: Optional[str] = None,
                 workers: Optional[Workers] = None) -> None:
        self.items = dict(items)
        self.workers = workers if workers is not None and workers.count > 1 else None
        self.sliced = sliced_checkpoint.sliced_states(self.items) if self.workers else {}
        # A non-chief worker's scratch checkpoint leaves out what it writes itself.
        sliced_items = {key.split("/")[0] for key in self.sliced}
        self.checkpoint = tf.train.Checkpoint(**{
            name: item for name, item in self.items.items()
            if not (scratch_dir and name in sliced_items)})
        self.run_directory = run_directory
        self.keep = int(keep)
        self.stream = stream
        self.scratch_dir = scratch_dir
        self._manager: Optional[tf.train.CheckpointManager] = None

    @property
    def manager(self) -> tf.train.CheckpointManager:
        """The `tf.train.CheckpointManager` (created after `restore_latest`)."""
        if self._manager is None:
            self._manager = tf.train.CheckpointManager(
                self.checkpoint, self.scratch_dir or self.run_directory.checkpoint_dir,
                max_to_keep=1 if self.scratch_dir else self.keep)
        return self._manager

    @property
    def latest(self) -> Optional[str]:
        """The run's newest kept checkpoint's path (None before the first)."""
        if self.scratch_dir:
            return self.run_directory.latest_checkpoint()
        return self.manager.latest_checkpoint

    def restore_latest(self, stand_ins: Callable[[str], Mapping[str, Any]] = lambda path: {}
                       ) -> Optional[str]:
        """Restores the newest readable checkpoint; returns its path (None if there is none).
        ``stand_ins(path)``: items restored from the checkpoint at ``path`` in place of the
        run's of the same name (for a layout of theirs written by an older version).

        The chief first deletes the files of saves that did not finish (not recorded in the
        checkpoint state), naming them in one line. Across workers this precedes the chief's
        first training step, a collective, so it is over before any worker writes the part
        of its next save.

        Raises:
          CheckpointDamaged: checkpoints exist but none can be read.
          ConfigError: the newest readable one does not fit the run's state."""
        if not self.scratch_dir:
            state = tf.train.get_checkpoint_state(self.run_directory.checkpoint_dir)
            swept = sliced_checkpoint.sweep_unrecorded(
                self.run_directory.checkpoint_dir,
                None if state is None else list(state.all_model_checkpoint_paths))
            if swept:
                self._warn(f"note: removed the files of unfinished saves, which no checkpoint "
                           f"records, from {self.run_directory.checkpoint_dir}: "
                           f"{', '.join(swept)}")
        damaged = []
        for path in reversed(self.run_directory.checkpoint_paths()):
            try:
                tf.train.Checkpoint(**{**self.items, **stand_ins(path)}).restore(
                    path).assert_existing_objects_matched()
            except _READ_ERRORS as error:
                damaged.append(path)
                self._warn(f"warning: the checkpoint {path} cannot be read ({_first_line(error)})"
                           "; trying the previous one.")
                continue
            except (ValueError, AssertionError, tf.errors.InvalidArgumentError) as error:
                raise ConfigError(
                    f"The checkpoint {path} does not fit this run's data and model (its "
                    f"examples N, embedding size D or classes C differ): {error}. Use a new "
                    "--run_dir or the settings the checkpoint was written with.") from None
            self._set_aside(damaged)
            return path
        if damaged:
            files = ", ".join(name for path in damaged
                              for name in checkpoint_files(path))
            raise CheckpointDamaged(
                f"No checkpoint of the run in {self.run_directory.path} can be read; damaged: "
                f"{files}. Restore them from a copy, or delete "
                f"{self.run_directory.checkpoint_dir} to train the run again from the start.")
        return None

    def _set_aside(self, damaged: list[str]) -> None:
        """Moves damaged checkpoints to ``damaged/`` and drops them from the list."""
        if not damaged or self.scratch_dir:
            return
        directory = self.run_directory.checkpoint_dir
        aside = os.path.join(directory, DAMAGED_DIR)
        os.makedirs(aside, exist_ok=True)
        for path in damaged:
            for name in checkpoint_files(path):
                os.replace(name, os.path.join(aside, os.path.basename(name)))
        self._warn(f"warning: moved the damaged checkpoint(s) to {aside}.")
        state = tf.train.get_checkpoint_state(directory)
        pairs = [(p, t) for p, t in zip(state.all_model_checkpoint_paths,
                                        state.all_model_checkpoint_timestamps)
                 if os.path.join(directory, os.path.basename(p)) not in damaged]
        tf.compat.v1.train.update_checkpoint_state(
            directory, pairs[-1][0], all_model_checkpoint_paths=[p for p, _ in pairs],
            all_model_checkpoint_timestamps=[t for _, t in pairs],
            last_preserved_timestamp=state.last_preserved_timestamp)

    def variable_bytes(self) -> int:
        """Bytes of the distinct variables the checkpoint saves, Keras's and TensorFlow's, and
        of a sharded bank's whole state."""
        seen, total = set(), 0
        for item in tf.train.TrackableView(self.checkpoint).descendants():
            if isinstance(item, SlicedState):
                total += item.shape.num_elements() * item.dtype.size
                continue
            variable = item.value if isinstance(item, keras.Variable) else item
            if isinstance(variable, tf.Variable) and id(variable.handle) not in seen:
                seen.add(id(variable.handle))
                total += variable.shape.num_elements() * variable.dtype.size
        return total

    def save(self, checkpoint_number: int) -> str:
        """Writes checkpoint ``checkpoint_number`` (the global step), or CheckpointWriteFailed.
        Across workers with sliced state every worker calls it, and it counts once every
        worker's rows are in it (`sliced_checkpoint`)."""
        if self.sliced:
            return self._save_with_parts(checkpoint_number)
        return self._save(checkpoint_number)

    def _save(self, checkpoint_number: int, options=None) -> str:
        previous = self.latest
        try:
            path = self.manager.save(checkpoint_number=checkpoint_number, options=options)
            if self.scratch_dir:
                for name in os.listdir(self.scratch_dir):
                    shutil.rmtree(os.path.join(self.scratch_dir, name), ignore_errors=True)
                    if os.path.isfile(os.path.join(self.scratch_dir, name)):
                        os.remove(os.path.join(self.scratch_dir, name))
                self._manager = None
            return path
        except (tf.errors.UnavailableError, tf.errors.AbortedError):
            raise  # a lost worker (`lost_worker`)
        except (tf.errors.OpError, OSError) as error:
            partial = os.path.join(self.scratch_dir or self.run_directory.checkpoint_dir,
                                   f"ckpt-{checkpoint_number}_temp")
            shutil.rmtree(partial, ignore_errors=True)
            raise self._write_failed(checkpoint_number, _first_line(error), previous) from None

    def _write_failed(self, checkpoint_number: int, reason: str,
                      previous: Optional[str]) -> CheckpointWriteFailed:
        kept = (f"the previous checkpoint {previous} is intact" if previous
                else "no earlier checkpoint had been written")
        return CheckpointWriteFailed(
            f"Could not write the checkpoint of step {checkpoint_number} in "
            f"{self.run_directory.checkpoint_dir} ({reason}); {kept}. Free space (or fix the "
            "file system) and rerun the same command to resume.")

    def _save_with_parts(self, checkpoint_number: int) -> str:
        """Every worker writes its rows' part, then all agree twice: that every part is
        written, then that the chief merged them whole. A worker lost on the way stops the
        others (a collective fails) before the checkpoint counts."""
        prefix = os.path.join(self.run_directory.checkpoint_dir, f"ckpt-{checkpoint_number}")
        previous = self.latest
        index, count = self.workers.index, self.workers.count
        if self.scratch_dir:
            reason = None
            try:
                sliced_checkpoint.write_part(sliced_checkpoint.part_prefix(prefix, index),
                                             self.sliced)
            except (tf.errors.OpError, OSError) as error:
                reason = f"worker {index}: {_first_line(error)}"
            # The dense state, as the chief writes it (the same collectives, in its order).
            self._save(checkpoint_number)
            # Both rounds, whatever the first says: the chief takes part in both.
            unwritten = self.workers.failing(reason is None)
            unmerged = self.workers.failing(True)
            if unwritten:
                raise self._write_failed(checkpoint_number,
                                         reason or _unwritten_parts(unwritten), previous)
            if unmerged:
                raise self._write_failed(checkpoint_number, "the chief could not merge the "
                                         "workers' parts", previous)
            return prefix
        rounds = []

        def merge(path):
            sliced_checkpoint.move_into_parts(path, 0, self.sliced)
            rounds.append(self.workers.failing(True))
            problem = _unwritten_parts(rounds[0]) if rounds[0] else self._merge(path, count)
            rounds.append(self.workers.failing(problem is None))
            if problem:
                sliced_checkpoint.remove(path)
                raise self._write_failed(checkpoint_number, problem, previous)

        try:
            return self._save(checkpoint_number, tf.train.CheckpointOptions(
                experimental_write_callbacks=[merge]))
        except CheckpointWriteFailed:
            for _ in range(2 - len(rounds)):  # the others wait for the chief's word
                self.workers.failing(False)
            raise

    def _merge(self, prefix: str, count: int) -> Optional[str]:
        """Merges the workers' parts into ``prefix`` once they are checked; what is wrong, or
        None."""
        problems = sliced_checkpoint.part_problems(prefix, count, self.sliced)
        if problems:
            return "; ".join(problems)
        try:
            sliced_checkpoint.merge_parts(prefix, count)
        except (tf.errors.OpError, OSError) as error:
            return f"merging the workers' parts: {_first_line(error)}"
        missing = sliced_checkpoint.missing_keys(prefix, self.sliced)
        return f"not merged whole: {', '.join(missing)}" if missing else None

    def _warn(self, message: str) -> None:
        self.stream.write(message + "\n")
        self.stream.flush()


def _unwritten_parts(workers: list[int]) -> str:
    return (f"worker {workers[0]} could not write its part" if len(workers) == 1 else
            f"workers {', '.join(map(str, workers))} could not write their parts")


def _first_line(error: BaseException) -> str:
    """The error's first line without TensorFlow's op decorations."""
    text = re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:\w+\]", "", str(error))
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else type(error).__name__
