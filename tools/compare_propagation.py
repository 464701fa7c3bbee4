"""tools/compare_propagation.py runs `llp_tf.cli.compare_propagation` (as do ``llp-compare-propagation`` and
``python -m llp_tf.cli.compare_propagation``); its --help tells what it does."""

import sys

from llp_tf.cli import compare_propagation

if __name__ == "__main__":
    sys.exit(compare_propagation.main(sys.argv))
