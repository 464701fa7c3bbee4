"""tools/build_tfrecords.py runs `llp_tf.cli.build_tfrecords` (as do ``llp-build-tfrecords`` and
``python -m llp_tf.cli.build_tfrecords``); its --help tells what it does."""

import sys

from llp_tf.cli import build_tfrecords

if __name__ == "__main__":
    sys.exit(build_tfrecords.main(sys.argv))
