"""Errors raised for bad user input.

Library code raises these with a one-paragraph message that names the
offending file, flag or value and says what to do; entry points in `tools/`
catch `LLPError`, print the message and exit non-zero, without a traceback.

A message about settings names each as ``{flag name}`` and carries their
values (``settings``): it reads ``--epochs=3``, and once the entry point
that knows where each value came from calls `LLPError.with_origins`,
``--epochs=3 (command line)`` (`llp_tf.config_fields.name_settings`).
"""

from typing import Any, Mapping, Optional

from llp_tf.config_fields import name_settings


class LLPError(Exception):
    """Base class of errors caused by user input (a path, a file, a setting).

    Args:
      message: str; ``{name}`` stands for the setting ``name`` of ``settings``.
      settings: optional dict flag name -> value of the settings ``message`` names.
      origins: optional dict flag name -> where that value came from.
    """

    def __init__(self, message: str, settings: Optional[Mapping[str, Any]] = None,
                 origins: Optional[Mapping[str, str]] = None) -> None:
        self.template = message
        self.settings = dict(settings or {})
        self.origins = dict(origins or {})
        super().__init__(name_settings(message, self.settings, self.origins)
                         if self.settings else message)

    def with_origins(self, origins: Mapping[str, str]) -> "LLPError":
        """This error, naming where each of its settings came from (``origins``:
        flag name -> e.g. "command line"); origins it names already stay. Itself
        when it names no setting."""
        if not self.settings:
            return self
        error = type(self)(self.template, self.settings, {**origins, **self.origins})
        error.__cause__ = self.__cause__
        return error


class DataError(LLPError, ValueError):
    """A dataset, image, shard, split file or label that cannot be used."""


class ConfigError(LLPError, ValueError):
    """A setting, or a combination of settings, that cannot work."""
