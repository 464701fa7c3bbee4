"""Errors raised for bad user input: a one-paragraph message naming the file, flag or value and
what to do, which the entry points print without a traceback."""

from typing import Any, Mapping, Optional

from llp_tf.config_fields import name_settings


class LLPError(Exception):
    """Base class of errors caused by user input.

    Args:
      message: str; ``{name}`` stands for the setting ``name`` of ``settings``, written as
        ``--name=value`` (`llp_tf.config_fields.name_settings`).
      settings: optional dict flag name -> value; origins: optional dict flag name -> origin."""

    def __init__(self, message: str, settings: Optional[Mapping[str, Any]] = None,
                 origins: Optional[Mapping[str, str]] = None) -> None:
        self.template = message
        self.settings = dict(settings or {})
        self.origins = dict(origins or {})
        super().__init__(name_settings(message, self.settings, self.origins)
                         if self.settings else message)

    def with_origins(self, origins: Mapping[str, str]) -> "LLPError":
        """This error naming where each setting came from (``origins``: flag name -> e.g. "command
        line"); origins it has stay."""
        if not self.settings:
            return self
        error = type(self)(self.template, self.settings, {**origins, **self.origins})
        error.__cause__ = self.__cause__
        return error


class DataError(LLPError, ValueError):
    """A dataset, image, shard, split file or label that cannot be used."""


class ConfigError(LLPError, ValueError):
    """A setting, or a combination of settings, that cannot work."""
