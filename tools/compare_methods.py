"""tools/compare_methods.py runs `llp_tf.cli.compare_methods` (as do ``llp-compare-methods`` and
``python -m llp_tf.cli.compare_methods``); its --help tells what it does."""

import sys

from llp_tf.cli import compare_methods

if __name__ == "__main__":
    sys.exit(compare_methods.main(sys.argv))
