"""tools/predict.py runs `llp_tf.cli.predict` of the checkout it sits in (tools/_checkout.py),
as ``llp-predict`` and ``python -m llp_tf.cli.predict`` run the installed one; its --help
tells what it does."""

import sys

import _checkout  # noqa: F401 -- this checkout's llp_tf, first on the path
from llp_tf.cli import predict

if __name__ == "__main__":
    sys.exit(predict.main(sys.argv))
