"""The entry points: one module per tool, its flags and `main(argv, stdout, stderr)`.

The top layer of the package: flags are read here, and only here, and turned into
the explicit arguments of the library below (nothing in llp_tf imports this part).
Each tool runs as ``tools/NAME.py``, ``python -m llp_tf.cli.NAME`` or its console
script (``llp-train``, ``llp-predict``, ...: pyproject.toml). `command_line` is the
plumbing they share (--help, bad flags, flag origins, result files), `config_flags`
the training settings as flags, `quiet_start` the start-up that hides TensorFlow's
notices (each tool calls it before anything imports TensorFlow).
"""
