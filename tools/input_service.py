"""tools/input_service.py runs `llp_tf.cli.input_service` of the checkout it sits in
(tools/_checkout.py), as ``llp-input-service`` and ``python -m llp_tf.cli.input_service``
run the installed one; its --help tells what it does."""

import sys

import _checkout  # noqa: F401 -- this checkout's llp_tf, first on the path
from llp_tf.cli import input_service

if __name__ == "__main__":
    sys.exit(input_service.main(sys.argv))
