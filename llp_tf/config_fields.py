"""Config fields that carry their flag: help text, choices, flag name, state role. A config
section is a frozen dataclass of `setting` fields; the flags of tools/train.py are generated
from them. Imports nothing of TensorFlow or of the rest of llp_tf."""

import dataclasses
import re
from typing import Any, Mapping, Optional, Sequence

#: A setting named in a message: ``{flag name}``.
_NAMED = re.compile(r"\{(\w+)\}")


def setting(default: Any, help: str, choices: Optional[Sequence[str]] = None,  # noqa: A002
            flag: Optional[str] = None, state: bool = False) -> Any:
    """A config field with its flag's help text, choices and (if not the field's) name.

    ``state``: the field shapes a run's saved state, so a resume cannot change it."""
    return dataclasses.field(default=default, metadata={
        "help": help, "choices": None if choices is None else tuple(choices), "flag": flag,
        "state": state})


def flag_name(field: dataclasses.Field) -> str:
    """The flag name of a config field."""
    return field.metadata.get("flag") or field.name


def choice_problems(section: Any) -> list[str]:
    """One message per field of the dataclass ``section`` whose value is not among its choices."""
    return ["{" + flag_name(field) + "} must be one of " + ", ".join(field.metadata["choices"])
            for field in dataclasses.fields(section)
            if field.metadata.get("choices")
            and getattr(section, field.name) not in field.metadata["choices"]]


def as_flag(name: str, value: Any) -> str:
    """``--name=value`` as on a command line (``--name``/``--noname`` for a bool, a sequence
    comma-joined, ``--name unset`` for None)."""
    if value is None:
        return f"--{name} unset"
    if isinstance(value, bool):
        return f"--{'' if value else 'no'}{name}"
    if isinstance(value, (tuple, list)):
        value = ",".join(str(v) for v in value)
    return f"--{name}={value}"


def name_settings(message: str, values: Mapping[str, Any],
                  origins: Optional[Mapping[str, str]] = None) -> str:
    """``message`` with each ``{name}`` of ``values`` (flag name -> value) written `as_flag`,
    followed by its origin in parentheses where ``origins`` has it."""
    origins = origins or {}

    def named(match):
        name = match[1]
        if name not in values:
            return match[0]
        origin = f" ({origins[name]})" if name in origins else ""
        return as_flag(name, values[name]) + origin

    return _NAMED.sub(named, message)
