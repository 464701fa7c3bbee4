"""tools/analyze.py runs `llp_tf.cli.analyze` of the checkout it sits in (tools/_checkout.py),
as ``llp-analyze`` and ``python -m llp_tf.cli.analyze`` run the installed one; its --help
tells what it does."""

import sys

import _checkout  # noqa: F401 -- this checkout's llp_tf, first on the path
from llp_tf.cli import analyze

if __name__ == "__main__":
    sys.exit(analyze.main(sys.argv))
