"""tools/export.py runs `llp_tf.cli.export` (as do ``llp-export`` and
``python -m llp_tf.cli.export``); its --help tells what it does."""

import sys

from llp_tf.cli import export

if __name__ == "__main__":
    sys.exit(export.main(sys.argv))
