"""tools/launch_local.py runs `llp_tf.cli.launch_local` of the checkout it sits in
(tools/_checkout.py), as ``llp-launch-local`` and ``python -m llp_tf.cli.launch_local`` run
the installed one; its --help tells what it does."""

import sys

import _checkout  # noqa: F401 -- this checkout's llp_tf, first on the path
from llp_tf.cli import launch_local

if __name__ == "__main__":
    sys.exit(launch_local.main(sys.argv))
