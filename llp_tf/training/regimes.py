"""The regimes: flagfiles of training settings in llp_tf/flags (a link to the repository's
flags/, a copy in the wheel). `flagfile` finds one by name; `regime_config` reads one into a
`TrainConfig` with overrides, as ``tools/train.py --regime=NAME --SETTING=VALUE`` does.
Imports absl and no TensorFlow."""

import os
from typing import Any

from absl import flags

from llp_tf.training import config_flags
from llp_tf.errors import ConfigError
from llp_tf.training.config import TrainConfig

FLAGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "flags")
#: A regime's run directory unless its flagfile or the command line names one.
RUNS_DIR = "runs"


def known_regimes() -> list[str]:
    """The names of the regimes' flagfiles, sorted."""
    return sorted(name[:-len(".flags")] for name in os.listdir(FLAGS_DIR)
                  if name.endswith(".flags"))


def flagfile(name: str) -> str:
    """The path of regime ``name``'s flagfile; ConfigError: no such regime."""
    path = os.path.join(FLAGS_DIR, name + ".flags")
    if not os.path.exists(path):
        raise ConfigError(f"Unknown regime {name!r}. Known regimes: "
                          f"{', '.join(known_regimes())}.")
    return path


def default_run_dir(name: str) -> str:
    """runs/NAME: the run directory of regime ``name`` when none is given."""
    return os.path.join(RUNS_DIR, name)


def regime_config(name: str, **overrides: Any) -> TrainConfig:
    """The `TrainConfig` of regime ``name``'s flagfile with ``overrides`` (by flag name; a
    list flag as a tuple) applied over it; the run directory defaults as `default_run_dir`.

    Raises:
      ConfigError: an unknown regime or setting, or settings that do not fit together.
    """
    values = flags.FlagValues()
    config_flags.define_config_flags(values)
    values(["regime", f"--flagfile={flagfile(name)}"])
    overrides.setdefault("run_dir", values.run_dir or default_run_dir(name))
    return config_flags.config_from_flags(values, **overrides)
