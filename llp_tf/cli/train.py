"""Train with Local Label Propagation (or the supervised baseline).

  tools/train.py --regime=demo
  tools/train.py --regime=r18_p10_q100 --data_dir=/data/tfds
  tools/train.py --flagfile=my.flags --epochs=20

`--regime=NAME` starts from the settings of a regime (its names: --regime below); every
other flag on the command line overrides them.
Rerunning the same command resumes the run in --run_dir from its latest checkpoint. SIGTERM
or Ctrl-C stops the run with a checkpoint after its current loop of steps, exit code 143 or
130; a second Ctrl-C aborts at once. Several workers on one machine: tools/launch_local.py.
"""

import os
import signal
import sys
from typing import Sequence, TextIO

from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)

from absl import flags  # noqa: E402

from llp_tf.training import config_flags  # noqa: E402
from llp_tf.cli import command_line  # noqa: E402
from llp_tf.training import regimes  # noqa: E402
from llp_tf.errors import ConfigError  # noqa: E402
from llp_tf.training.config import TrainConfig  # noqa: E402 -- no TensorFlow

#: A run a signal stopped exits with 128 + the signal's number, as a shell reports it.
SIGNAL_EXIT_CODE_BASE = 128
ABORTED = ("Aborted by Ctrl-C without writing a checkpoint; rerun the same command to resume "
           "from the run's latest one.")


def make_flags() -> flags.FlagValues:
    """The tool's `flags.FlagValues`: --regime and one flag per training setting."""
    values = command_line.new_flag_values()
    flags.DEFINE_string("regime", None, "A regime, the settings of a run by name: "
                        f"{', '.join(regimes.known_regimes())}. Its settings apply first, and "
                        "every other flag on the command line overrides them, wherever it "
                        "stands.",
                        flag_values=values)
    config_flags.define_config_flags(values)
    flags.DEFINE_boolean("overwrite", False, "Start the run in --run_dir afresh: delete what "
                         "training wrote there (config.json, config_history.jsonl, split.npz, "
                         "checkpoints/, metrics.jsonl, tensorboard/; nothing else) instead of "
                         "resuming it. A run directory without a checkpoint starts afresh "
                         "without it. Only a training run's files are deleted: a --run_dir "
                         "holding files of those names without a config.json of a run is "
                         "refused. Keep it out of a command a scheduler reruns after "
                         "preemption: each rerun would start over.", flag_values=values)
    command_line.define_verbosity(values)
    return values


def expand_regime(argv: Sequence[str], stderr: TextIO) -> list[str] | None:
    """``argv`` with ``--regime=NAME`` read first, as ``--flagfile=flags/NAME.flags``
    right after the program name; None after an error on ``stderr``."""
    program, rest, regime_args = argv[:1], [], []
    args = iter(argv[1:])
    for arg in args:
        if arg == "--regime":
            arg = "--regime=" + next(args, "")
        if arg.startswith("--regime="):
            regime_args.append(arg)
        else:
            rest.append(arg)
    if len(regime_args) > 1:
        stderr.write(f"Give --regime once; the command line has {' '.join(regime_args)}.\n")
        return None
    for arg in regime_args:
        try:
            path = regimes.flagfile(arg.split("=", 1)[1])
        except ConfigError as error:
            stderr.write(f"{error}\n")
            return None
        program += [f"--flagfile={path}", arg]
    return program + rest


def config_from_flags(values: flags.FlagValues) -> TrainConfig:
    """The `TrainConfig` of parsed flags (the run directory defaults to runs/REGIME)."""
    run_dir = values.run_dir or (regimes.default_run_dir(values.regime) if values.regime
                                 else None)
    if run_dir is None:
        raise ConfigError("Give --run_dir (or --regime, whose run directory is runs/REGIME).")
    return config_flags.config_from_flags(values, run_dir=run_dir)


def flag_origins(values: flags.FlagValues, argv: Sequence[str]) -> dict[str, str]:
    """`command_line.flag_origins`, the regime's flagfile named --regime=NAME."""
    regime = values.regime
    return command_line.flag_origins(values, argv, regime and {
        os.path.join(regimes.FLAGS_DIR, f"{regime}.flags"): f"--regime={regime}"})


def train(values: flags.FlagValues, stdout: TextIO,
          stderr: TextIO) -> command_line.ExitCode | None:
    """Trains the run of the parsed flags; an `ExitCode` when a signal stopped it."""
    config = config_from_flags(values)
    # After the flags: logical CPUs (--cpu_replicas) are set before TensorFlow touches a device.
    from llp_tf.training import run_training  # noqa: PLC0415
    from llp_tf.training.preemption import TrainingStopped  # noqa: PLC0415
    try:
        run_training(config, stdout, overwrite=values.overwrite)
    except TrainingStopped as stopped:
        stdout.write(f"{stopped}\n")
        return command_line.ExitCode(SIGNAL_EXIT_CODE_BASE + stopped.signal)
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside the loop of steps
        stdout.flush()
        stderr.write(ABORTED + "\n")
        return command_line.ExitCode(SIGNAL_EXIT_CODE_BASE + signal.SIGINT)
    return None


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Runs the tool on ``argv`` (default sys.argv); returns the exit code (2: an
    unknown regime or unexpected arguments)."""
    argv = sys.argv if argv is None else argv
    argv = expand_regime(argv, stderr or sys.stderr)
    if argv is None:
        return 2
    return command_line.run(argv, stdout, stderr, make_flags(), __doc__, train, stray_exit_code=2,
                            origins=flag_origins)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
