"""tools/predict.py runs `llp_tf.cli.predict` (as do ``llp-predict`` and
``python -m llp_tf.cli.predict``); its --help tells what it does."""

import sys

from llp_tf.cli import predict

if __name__ == "__main__":
    sys.exit(predict.main(sys.argv))
