"""tools/train.py runs `llp_tf.cli.train` (as do ``llp-train`` and
``python -m llp_tf.cli.train``); its --help tells what it does."""

import sys

from llp_tf.cli import train

if __name__ == "__main__":
    sys.exit(train.main(sys.argv))
