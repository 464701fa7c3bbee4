"""tools/compare_propagation.py runs `llp_tf.cli.compare_propagation` of the checkout it sits
in (tools/_checkout.py), as ``llp-compare-propagation`` and ``python -m
llp_tf.cli.compare_propagation`` run the installed one; its --help tells what it does."""

import sys

import _checkout  # noqa: F401 -- this checkout's llp_tf, first on the path
from llp_tf.cli import compare_propagation

if __name__ == "__main__":
    sys.exit(compare_propagation.main(sys.argv))
