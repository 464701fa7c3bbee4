"""Errors raised for bad user input.

Library code raises these with a one-paragraph message that names the
offending file, flag or value and says what to do; entry points in `tools/`
catch `LLPError`, print the message and exit non-zero, without a traceback.
"""


class LLPError(Exception):
    """Base class of errors caused by user input (a path, a file, a setting)."""


class DataError(LLPError, ValueError):
    """A dataset, image, shard, split file or label that cannot be used."""


class ConfigError(LLPError, ValueError):
    """A setting, or a combination of settings, that cannot work."""
