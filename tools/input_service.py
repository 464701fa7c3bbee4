"""tools/input_service.py runs `llp_tf.cli.input_service` (as do ``llp-input-service`` and
``python -m llp_tf.cli.input_service``); its --help tells what it does."""

import sys

from llp_tf.cli import input_service

if __name__ == "__main__":
    sys.exit(input_service.main(sys.argv))
