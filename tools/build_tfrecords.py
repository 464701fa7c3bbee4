"""tools/build_tfrecords.py runs `llp_tf.cli.build_tfrecords` of the checkout it sits in
(tools/_checkout.py), as ``llp-build-tfrecords`` and ``python -m
llp_tf.cli.build_tfrecords`` run the installed one; its --help tells what it does."""

import sys

import _checkout  # noqa: F401 -- this checkout's llp_tf, first on the path
from llp_tf.cli import build_tfrecords

if __name__ == "__main__":
    sys.exit(build_tfrecords.main(sys.argv))
