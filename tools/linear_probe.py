"""tools/linear_probe.py runs `llp_tf.cli.linear_probe` (as do ``llp-probe`` and
``python -m llp_tf.cli.linear_probe``); its --help tells what it does."""

import sys

from llp_tf.cli import linear_probe

if __name__ == "__main__":
    sys.exit(linear_probe.main(sys.argv))
