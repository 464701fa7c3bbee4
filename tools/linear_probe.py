"""tools/linear_probe.py runs `llp_tf.cli.linear_probe` of the checkout it sits in
(tools/_checkout.py), as ``llp-probe`` and ``python -m llp_tf.cli.linear_probe`` run the
installed one; its --help tells what it does."""

import sys

import _checkout  # noqa: F401 -- this checkout's llp_tf, first on the path
from llp_tf.cli import linear_probe

if __name__ == "__main__":
    sys.exit(linear_probe.main(sys.argv))
