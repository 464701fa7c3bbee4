"""tools/check_data.py runs `llp_tf.cli.check_data` of the checkout it sits in
(tools/_checkout.py), as ``llp-check-data`` and ``python -m llp_tf.cli.check_data`` run the
installed one; its --help tells what it does."""

import sys

import _checkout  # noqa: F401 -- this checkout's llp_tf, first on the path
from llp_tf.cli import check_data

if __name__ == "__main__":
    sys.exit(check_data.main(sys.argv))
