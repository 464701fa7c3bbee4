"""Test session setup: TensorFlow quiet, CPU split into four logical devices.

The split must happen before TensorFlow initialises its devices, so it runs at
import time, before any test module touches TensorFlow. Tests that need two
replicas use the `two_replica_strategy` fixture, those that need four
`four_replica_strategy` (session fixtures: one strategy per device set for the whole
session, see `llp_tf.training.distribution`); everything else runs on the first logical CPU
as usual.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The tools run in this process name themselves as installed (llp_tf.tool_names).
os.environ.pop("LLP_TF_CHECKOUT", None)

import pytest  # noqa: E402

from llp_tf.cli import quiet_start  # noqa: E402
from tests.file_order import longest_first  # noqa: E402
from tests.session_cache import shared, shared_folder  # noqa: E402

# TensorFlow's start-up notices hidden as in the tools (pytest-xdist's workers
# would print them).
quiet_start.import_tensorflow(["pytest"])

import tensorflow as tf  # noqa: E402

NUM_LOGICAL_CPUS = 4
_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS)
LOGICAL_CPUS = [d.name for d in tf.config.list_logical_devices("CPU")]


@pytest.hookimpl(trylast=True)  # after the markers' selection: the order of what runs
def pytest_collection_modifyitems(items):
    longest_first(items)


@pytest.fixture(scope="session")
def two_replica_strategy():
    """MirroredStrategy over two logical CPU devices."""
    from llp_tf.training.distribution import mirrored_strategy
    return mirrored_strategy(LOGICAL_CPUS[:2])


@pytest.fixture(scope="session")
def four_replica_strategy():
    """MirroredStrategy over four logical CPU devices, its collectives' group keys apart from
    the two-device one's (as TensorFlow's own tests set them: the same keys over another
    device set abort)."""
    from llp_tf.training.distribution import mirrored_strategy
    base = tf.distribute.MirroredStrategy._collective_key_base
    tf.distribute.MirroredStrategy._collective_key_base = base + 100_000
    try:
        return mirrored_strategy(LOGICAL_CPUS[:4])
    finally:
        tf.distribute.MirroredStrategy._collective_key_base = base


@pytest.fixture(scope="session")
def stripes(tmp_path_factory):
    """Dataset name of an image folder of 4 classes x (40 train + 10 validation)."""
    from tests.runs import write_stripes
    return shared(tmp_path_factory, "stripes", write_stripes)


@pytest.fixture(scope="session")
def tiny_llp_training(tmp_path_factory, stripes):
    """(`TrainConfig`, final metrics) of a finished 3-epoch LLP run on `stripes`
    (1 warm-up epoch), with `tests.runs.tiny_config`'s settings; trained once for
    all the test run's workers (`shared`).

    Shared by the tests of training and of the tools that read runs; do not
    write into its run directory.
    """
    import io

    from llp_tf.training import run_training
    from tests.runs import tiny_config
    final = shared(tmp_path_factory, "tiny_llp",
                   lambda folder: run_training(tiny_config(folder, stripes), io.StringIO()))
    return tiny_config(shared_folder(tmp_path_factory, "tiny_llp"), stripes), final


@pytest.fixture(scope="session")
def tiny_llp_run(tiny_llp_training):
    """Run directory of `tiny_llp_training`; do not write into it."""
    return tiny_llp_training[0].run_dir


@pytest.fixture(scope="module")
def run(tiny_llp_run):
    """`run_loader.TrainedRun` of `tiny_llp_run`, one per test module (tests may change it)."""
    from llp_tf.after_training import run_loader
    return run_loader.load_run(tiny_llp_run)


@pytest.fixture(scope="module")
def class_names(run):
    """The class names of `run`'s dataset."""
    from llp_tf.data.sources.registry import load_source
    return load_source(run.config.data.dataset, run.config.data.data_dir).info.class_names


@pytest.fixture
def read_only_folder(tmp_path, monkeypatch):
    """An existing folder this process cannot create files or folders in (mode
    0o555; for root, which the mode does not stop, os.open and os.makedirs
    refuse paths inside it as the system refuses other users)."""
    import errno

    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o555)
    if os.access(folder, os.W_OK):
        for name in ("open", "makedirs"):
            def refuse(path, *args, _call=getattr(os, name), **kwargs):
                if str(path).startswith(str(folder) + os.sep):
                    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
                return _call(path, *args, **kwargs)

            monkeypatch.setattr(os, name, refuse)
    yield folder
    folder.chmod(0o755)
