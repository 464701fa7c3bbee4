"""The names exported at the top of the package are the core's and the runs' own objects."""

import importlib
import subprocess
import sys

import llp_tf

WHERE = {"MemoryBank": "llp_tf.core.memory_bank", "local_density": "llp_tf.core.propagation",
         "propagate": "llp_tf.core.propagation", "aggregation_loss": "llp_tf.core.losses",
         "categorisation_loss": "llp_tf.core.losses", "llp_loss": "llp_tf.core.losses",
         "l2_penalty": "llp_tf.core.losses", "make_splits": "llp_tf.data.splits.regime",
         "train_regime": "llp_tf.runs", "load_run": "llp_tf.runs", "Run": "llp_tf.runs"}


def test_public_names_are_the_core_objects():
    assert sorted(llp_tf.__all__) == sorted(WHERE)
    for name, module in WHERE.items():
        assert getattr(llp_tf, name) is getattr(importlib.import_module(module), name), name
    assert set(llp_tf.__all__) <= set(dir(llp_tf))


def test_unknown_names_and_light_imports():
    try:
        llp_tf.no_such_thing  # noqa: B018
    except AttributeError as error:
        assert "no_such_thing" in str(error)
    else:
        raise AssertionError("an unknown name was found")
    # The errors module stays importable without TensorFlow.
    code = "import sys, llp_tf.errors; print('tensorflow' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "False"
