"""tools/check_data.py runs `llp_tf.cli.check_data` (as do ``llp-check-data`` and
``python -m llp_tf.cli.check_data``); its --help tells what it does."""

import sys

from llp_tf.cli import check_data

if __name__ == "__main__":
    sys.exit(check_data.main(sys.argv))
