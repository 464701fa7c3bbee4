"""Train with Local Label Propagation (or the supervised baseline).

  tools/train.py --regime=demo
  tools/train.py --regime=r18_p10_q100 --data_dir=/data/tfds
  tools/train.py --flagfile=my.flags --epochs=20

`--regime=NAME` reads flags/NAME.flags (the paper's runs and `demo`); flags
given after it override the file. Rerunning the same command resumes the run
in --run_dir from its latest checkpoint, with the split saved there.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

import config_flags  # noqa: E402 -- tools/ is on the path of a script run from it
import tool_cli  # noqa: E402

FLAGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "flags")
FLAGS = flags.FLAGS

flags.DEFINE_string("regime", None, "Name of a flagfile in flags/ (e.g. demo, r18_p10_q100); "
                    "its settings apply first, later flags override them.")
# One flag per training setting, with the defaults, choices and help of
# llp_tf/training/config.py.
config_flags.define_config_flags(FLAGS)


def known_regimes():
    return sorted(name[:-len(".flags")] for name in os.listdir(FLAGS_DIR)
                  if name.endswith(".flags"))


def expand_regime(argv):
    """Replaces ``--regime=NAME`` by ``--flagfile=flags/NAME.flags`` (at its position)."""
    expanded = []
    for arg in argv:
        if arg.startswith("--regime="):
            name = arg.split("=", 1)[1]
            path = os.path.join(FLAGS_DIR, name + ".flags")
            if not os.path.exists(path):
                sys.stderr.write(f"Unknown regime {name!r}. Known regimes: "
                                 f"{', '.join(known_regimes())}.\n")
                sys.exit(2)
            expanded += [f"--flagfile={path}", arg]
        else:
            expanded.append(arg)
    return expanded


def config_from_flags():
    run_dir = FLAGS.run_dir or (os.path.join("runs", FLAGS.regime) if FLAGS.regime else None)
    if run_dir is None:
        from llp_tf.errors import ConfigError
        raise ConfigError("Give --run_dir (or --regime, whose run directory is runs/REGIME).")
    return config_flags.config_from_flags(FLAGS, run_dir=run_dir)


def train():
    config = config_from_flags()
    # Imported after the flags are read: logical CPUs (--cpu_replicas) must be
    # configured before TensorFlow touches a device.
    from llp_tf.training import run_training  # noqa: PLC0415
    run_training(config)


def main(argv):
    return tool_cli.run_absl_tool(argv, FLAGS, train)


if __name__ == "__main__":
    app.run(main, argv=expand_regime(sys.argv))
