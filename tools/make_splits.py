"""tools/make_splits.py runs `llp_tf.cli.make_splits` (as do ``llp-make-splits`` and
``python -m llp_tf.cli.make_splits``); its --help tells what it does."""

import sys

from llp_tf.cli import make_splits

if __name__ == "__main__":
    sys.exit(make_splits.main(sys.argv))
