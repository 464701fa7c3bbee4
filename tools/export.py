"""tools/export.py runs `llp_tf.cli.export` of the checkout it sits in (tools/_checkout.py), as
``llp-export`` and ``python -m llp_tf.cli.export`` run the installed one; its --help tells
what it does."""

import sys

import _checkout  # noqa: F401 -- this checkout's llp_tf, first on the path
from llp_tf.cli import export

if __name__ == "__main__":
    sys.exit(export.main(sys.argv))
