"""tools/train.py runs `llp_tf.cli.train` of the checkout it sits in (tools/_checkout.py), as
``llp-train`` and ``python -m llp_tf.cli.train`` run the installed one; its --help tells
what it does."""

import sys

import _checkout  # noqa: F401 -- this checkout's llp_tf, first on the path
from llp_tf.cli import train

if __name__ == "__main__":
    sys.exit(train.main(sys.argv))
