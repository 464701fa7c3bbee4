"""tools/make_splits.py runs `llp_tf.cli.make_splits` of the checkout it sits in
(tools/_checkout.py), as ``llp-make-splits`` and ``python -m llp_tf.cli.make_splits`` run
the installed one; its --help tells what it does."""

import sys

import _checkout  # noqa: F401 -- this checkout's llp_tf, first on the path
from llp_tf.cli import make_splits

if __name__ == "__main__":
    sys.exit(make_splits.main(sys.argv))
