"""The entry points, the top layer (flags are read only here): one module per tool, its
flags and `main(argv, stdout, stderr)`, run as ``tools/NAME.py``, ``python -m
llp_tf.cli.NAME`` or a console script."""
