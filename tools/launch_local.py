"""tools/launch_local.py runs `llp_tf.cli.launch_local` (as do ``llp-launch-local`` and
``python -m llp_tf.cli.launch_local``); its --help tells what it does."""

import sys

from llp_tf.cli import launch_local

if __name__ == "__main__":
    sys.exit(launch_local.main(sys.argv))
