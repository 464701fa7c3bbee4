"""The run's record of its settings: what it started with, and each change.

- ``config.json``: the settings the run was started with, written once,
  when the run directory is set up, and never rewritten; beside them,
  ``data_files`` records the label subset and exclude lists the split was
  made from (path and SHA-256; `save_config`);
- ``config_history.jsonl``: one line per resume that changed settings,
  ``{"step": S, "time": ..., "changed": {name: [old, new], ...}}``, where
  ``step`` is the global step the resumed run continued from.

The settings a run trains with now are ``config.json`` with the history
applied in order (`current_config`); tools that read a finished run use
them. Settings that shape the saved state (`config.state_settings`: data,
split, model, method) cannot change on resume: `check_resumable` refuses them.
Where the run directory lives (``run_dir``) is not a setting of the run and
is never compared. Errors about settings read from these files name the file
each value came from (`llp_tf.errors`).
"""

from __future__ import annotations

import datetime
import json
import os
from typing import Any, Optional

from llp_tf.config_fields import as_flag
from llp_tf.errors import ConfigError, DataError
from llp_tf.training.config import TrainConfig, state_settings
from llp_tf.training.run_directory import CONFIG_FILE, HISTORY_FILE, RunDirectory

#: The key of ``config.json`` that records the list files a run's split was made from.
DATA_FILES = "data_files"

#: Settings that are not part of how the run trains.
NOT_COMPARED = ("run_dir",)


def _read_json(path: str) -> str:
    with open(path) as f:
        return f.read()


def _from_files(origins: dict[str, str], make: Any, *args: Any, **kwargs: Any) -> Any:
    """``make(*args, **kwargs)``, its ConfigError naming where each setting came
    from: the origin in ``origins`` (flag name -> origin), else ``origins[""]``."""
    try:
        return make(*args, **kwargs)
    except ConfigError as error:
        default = origins[""]
        raise error.with_origins({name: origins.get(name, default)
                                  for name in error.settings}) from None


def started_config(run_dir: str) -> Optional[TrainConfig]:
    """The settings the run in ``run_dir`` was started with (None if it has none)."""
    path = os.path.join(str(run_dir), CONFIG_FILE)
    if not os.path.isfile(path):
        return None
    return _from_files({"": f"from {path}"}, TrainConfig.from_json, _read_json(path))


def read_history(run_dir: str) -> list[dict]:
    """The run's settings changes, oldest first ([] if there were none).

    Raises:
      DataError: a line that is not JSON.
    """
    return RunDirectory(run_dir).read_json_lines(HISTORY_FILE)


def current_config(run_dir: str) -> Optional[TrainConfig]:
    """The settings the run trains with now: ``config.json`` with the history
    applied (None if the run has no ``config.json``)."""
    config = started_config(run_dir)
    origins = {"": f"from {RunDirectory(run_dir).file(CONFIG_FILE)}"}
    history = RunDirectory(run_dir).file(HISTORY_FILE)
    for entry in read_history(run_dir) if config is not None else []:
        changed = {name: new for name, (_, new) in entry["changed"].items()}
        origins.update({name: f"from {history}, step {entry['step']}" for name in changed})
        config = _from_files(origins, config.replace, **changed)
    return config


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def changed_settings(before: TrainConfig, after: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """dict flag name -> (old, new) of the settings that differ (``run_dir`` aside)."""
    old, new = before.settings(), after.settings()
    return {name: (_plain(old[name]), _plain(new[name])) for name in old
            if name not in NOT_COMPARED and old[name] != new[name]}


def format_changes(changed: dict[str, tuple[Any, Any]]) -> str:
    """``"k: 10 -> 5, epochs: 8 -> 12"``."""
    return ", ".join(f"{name}: {old!r} -> {new!r}" for name, (old, new) in changed.items())


def check_resumable(config: TrainConfig) -> None:
    """Raises ConfigError when ``config.run_dir`` holds a run whose state
    settings (`config.state_settings`) differ from ``config``'s."""
    saved = current_config(config.run_dir)
    if saved is None:
        return
    changed = {name: values for name, values in changed_settings(saved, config).items()
               if name in state_settings()}
    if changed:
        listed = "; ".join("{" + name + "}" + f" where its {CONFIG_FILE} has "
                           f"{as_flag(name, old)}" for name, (old, _) in changed.items())
        raise ConfigError(
            f"The run directory {config.run_dir} holds a run with other settings: {listed}. "
            "Its checkpoints cannot continue with these settings: use a new --run_dir, or "
            "rerun with the saved settings.", settings=config.settings())


def save_config(config: TrainConfig, data_files: Optional[dict] = None) -> None:
    """Writes ``run_dir/config.json`` (atomically), the record of a new run's settings.

    ``data_files``: what the run's split records of the files it was made from
    (`regime.read_made_from`: the label subset list and the exclude list, each
    with its path and SHA-256), written under the key "data_files" beside the
    settings (readers of the settings ignore it).
    """
    text = config.to_json()
    if data_files is not None:
        text = json.dumps({**json.loads(text), DATA_FILES: data_files}, indent=2,
                          sort_keys=True)
    RunDirectory(config.run_dir).write_atomically(CONFIG_FILE, text)


def record_changes(config: TrainConfig, step: int) -> dict[str, tuple[Any, Any]]:
    """Appends the settings ``config`` changes against the run's current ones to
    the history, at global step ``step``; returns them ({} when none changed)."""
    saved = current_config(config.run_dir)
    if saved is None:
        raise DataError(f"{config.run_dir} has no {CONFIG_FILE} to record changes against.")
    changed = changed_settings(saved, config)
    if changed:
        RunDirectory(config.run_dir).append_json_line(HISTORY_FILE, {
            "step": int(step), "time": datetime.datetime.now().isoformat(timespec="seconds"),
            "changed": {name: [old, new] for name, (old, new) in changed.items()}})
    return changed


def describe_history(run_dir: str) -> list[str]:
    """One line per recorded change, e.g. ``"step 40: k: 10 -> 5"``."""
    return [f"step {entry['step']}: " + format_changes(
        {name: tuple(values) for name, values in entry["changed"].items()})
        for entry in read_history(run_dir)]

