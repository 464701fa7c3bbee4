"""tools/analyze.py runs `llp_tf.cli.analyze` (as do ``llp-analyze`` and
``python -m llp_tf.cli.analyze``); its --help tells what it does."""

import sys

from llp_tf.cli import analyze

if __name__ == "__main__":
    sys.exit(analyze.main(sys.argv))
