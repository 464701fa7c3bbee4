"""absl flags generated from the training config's fields: one flag per field of
`TrainConfig`'s sections, with its name, default, help (a method's prefixed with the
method) and choices (`define_config_flags`), read back by `config_from_flags`."""

import typing
from typing import Any

from absl import flags

from llp_tf.training import config


def _base_type(annotation):
    """X of Optional[X]; the annotation itself otherwise."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if typing.get_origin(annotation) is typing.Union and len(args) == 1 \
        else annotation


def _define(name, field, annotation, flag_values, method=None):
    kind = _base_type(annotation)
    default, help_text = field.default, field.metadata["help"]
    if method is not None:
        help_text = f"[--method={method}] {help_text}"
    choices = field.metadata.get("choices")
    if choices:
        flags.DEFINE_enum(name, default, list(choices), help_text, flag_values=flag_values)
    elif typing.get_origin(kind) is tuple:
        flags.DEFINE_list(name, None if default is None else [str(v) for v in default],
                          help_text, flag_values=flag_values)
    else:
        define = {str: flags.DEFINE_string, int: flags.DEFINE_integer,
                  float: flags.DEFINE_float, bool: flags.DEFINE_boolean}[kind]
        define(name, default, help_text, flag_values=flag_values)


def define_config_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines one flag per training setting on ``flag_values``."""
    methods = config.method_sections()
    for name, (section, field) in config.settings_fields().items():
        _define(name, field, config.field_type(section, field), flag_values,
                method=section if section in methods else None)


def config_from_flags(flag_values: flags.FlagValues = flags.FLAGS,
                      **overrides: Any) -> config.TrainConfig:
    """The `TrainConfig` of the parsed flags; ``overrides`` (by flag name) win.

    List flags (e.g. --lr_drop_epochs=194,239) become tuples of int.
    """
    settings = {}
    for name in config.settings_fields():
        value = flag_values[name].value
        settings[name] = [int(v) for v in value] if isinstance(value, list) else value
    settings.update(overrides)
    return config.TrainConfig.from_settings(**settings)
