"""The run's record of its settings: ``config.json``, the settings it started with (and
``data_files``, the lists its split was made from), never rewritten, and
``config_history.jsonl``, ``{"step": S, "time": ..., "changed": {name: [old, new]}}`` per
resume that changed settings. The settings a run trains with now are ``config.json`` with
the history applied (`current_config`); state settings cannot change (`check_resumable`)."""

from __future__ import annotations

import datetime
import json
import os
from typing import Any, Optional

from llp_tf.config_fields import as_flag
from llp_tf.errors import ConfigError, DataError
from llp_tf.training.config import TrainConfig, state_settings
from llp_tf.training.run_directory import CONFIG_FILE, HISTORY_FILE, RunDirectory

#: The key of ``config.json`` recording the list files the split was made from.
DATA_FILES = "data_files"

#: Settings that are not part of how the run trains.
NOT_COMPARED = ("run_dir",)


def _read_json(path: str) -> str:
    with open(path) as f:
        return f.read()


def _from_files(origins: dict[str, str], make: Any, *args: Any, **kwargs: Any) -> Any:
    """``make(*args, **kwargs)``, its ConfigError naming each setting's origin (``origins``)."""
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
    """The run's settings changes, oldest first; DataError for a line that is not JSON."""
    return RunDirectory(run_dir).read_json_lines(HISTORY_FILE)


def current_config(run_dir: str) -> Optional[TrainConfig]:
    """The settings the run trains with now (None if it has no ``config.json``)."""
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
    """Raises ConfigError when ``config.run_dir`` holds a run whose state settings differ."""
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
    """Writes ``run_dir/config.json`` atomically: a new run's settings, and under "data_files" the
    split's source files (`regime.read_made_from`: path and SHA-256 of each)."""
    text = config.to_json()
    if data_files is not None:
        text = json.dumps({**json.loads(text), DATA_FILES: data_files}, indent=2,
                          sort_keys=True)
    RunDirectory(config.run_dir).write_atomically(CONFIG_FILE, text)


def record_changes(config: TrainConfig, step: int) -> dict[str, tuple[Any, Any]]:
    """Appends the settings ``config`` changes to the history at step ``step``; returns them."""
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

