"""Config fields that carry their flag: help text, choices, flag name, state role.

A section of the training config (`llp_tf.training.config`) is a frozen
dataclass whose fields are made by `setting`; the flags of tools/train.py
are generated from that metadata, and `choice_problems` validates the
choices from it, so each default, choice list and help text is written once.
This module imports nothing of TensorFlow or of the rest of llp_tf.
"""

import dataclasses
from typing import Any, Optional, Sequence


def setting(default: Any, help: str, choices: Optional[Sequence[str]] = None,  # noqa: A002
            flag: Optional[str] = None, state: bool = False,
            aliases: Sequence[str] = ()) -> Any:
    """A config field with its flag's help text, choices and (if not the field's) name.

    ``state``: the field shapes a run's saved state (data, split, model,
    method), so a resumed run cannot change it. ``aliases``: earlier names of
    the field and its flag, still read (from flags and ``config.json``) and
    warned about.
    """
    return dataclasses.field(default=default, metadata={
        "help": help, "choices": None if choices is None else tuple(choices), "flag": flag,
        "state": state, "aliases": tuple(aliases)})


def flag_name(field: dataclasses.Field) -> str:
    """The flag name of a config field."""
    return field.metadata.get("flag") or field.name


def choice_problems(section: Any) -> list[str]:
    """One message per field of the dataclass ``section`` whose value is not
    among its `setting` choices."""
    return [f"{flag_name(field)} must be one of {field.metadata['choices']}, not "
            f"{getattr(section, field.name)!r}"
            for field in dataclasses.fields(section)
            if field.metadata.get("choices")
            and getattr(section, field.name) not in field.metadata["choices"]]
