import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.after_training import run_loader
from llp_tf.errors import ConfigError


def _checkpoint_tensor(path, suffix):
    """The checkpoint value whose variable name ends with ``suffix``."""
    names = [name for name, _ in tf.train.list_variables(path) if name.endswith(suffix)]
    assert len(names) == 1, names
    return tf.train.load_checkpoint(path).get_tensor(names[0])


def test_load_run_restores_the_latest_weights_and_bank(tiny_llp_run):
    run = run_loader.load_run(tiny_llp_run)
    assert run.config.method.name == "llp" and run.num_classes == 4
    assert run.checkpoint == tf.train.latest_checkpoint(os.path.join(tiny_llp_run, "checkpoints"))
    assert run.step == 15  # 3 epochs of ceil(160 / 32) steps
    np.testing.assert_array_equal(run.bank["embeddings"],
                                  _checkpoint_tensor(run.checkpoint, "bank/embeddings/.ATTRIBUTES/VARIABLE_VALUE"))
    np.testing.assert_array_equal(run.bank["labels"],
                                  _checkpoint_tensor(run.checkpoint, "bank/labels/.ATTRIBUTES/VARIABLE_VALUE"))
    kernel = run.model.embedding_head.kernel.numpy()
    saved = [name for name, shape in tf.train.list_variables(run.checkpoint)
             if name.startswith("model/") and list(shape) == list(kernel.shape)]
    assert any(np.array_equal(kernel, tf.train.load_checkpoint(run.checkpoint).get_tensor(n))
               for n in saved)
    assert run.labelled_index.size == 16 and run.used_index.size == 160
    # The bank's labelled rows carry their true classes (4 per class).
    assert np.bincount(run.bank["labels"][run.bank["is_labelled"]]).tolist() == [4] * 4


def test_restore_moves_to_an_older_checkpoint(tiny_llp_run):
    paths = run_loader.checkpoint_paths(tiny_llp_run)
    assert [run_loader.checkpoint_step(p) for p in paths] == sorted(
        run_loader.checkpoint_step(p) for p in paths)
    run = run_loader.load_run(tiny_llp_run, num_classes=4)
    run.restore(paths[0])
    assert run.step == run_loader.checkpoint_step(paths[0]) < run_loader.checkpoint_step(paths[-1])
    np.testing.assert_array_equal(run.bank["embeddings"],
                                  _checkpoint_tensor(paths[0], "bank/embeddings/.ATTRIBUTES/VARIABLE_VALUE"))


def test_a_directory_that_is_not_a_run_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="not a training run directory"):
        run_loader.load_run(str(tmp_path))


def test_load_run_does_not_need_the_runs_own_dataset(tiny_llp_run, tmp_path):
    # Transfer: the run's training data may not exist where it is probed.
    copy = shutil.copytree(tiny_llp_run, tmp_path / "run")
    with open(copy / "config.json") as f:
        settings = json.load(f)
    settings["data"]["dataset"] = f"folder:{tmp_path / 'gone'}"
    with open(copy / "config.json", "w") as f:
        json.dump(settings, f)
    run = run_loader.load_run(str(copy))
    assert run.config.data.dataset == f"folder:{tmp_path / 'gone'}"
    assert run.num_classes == 4 and run.step == 15


#: Loads a run without its bank in a fresh process; prints the peak RSS in bytes.
LOAD_WITHOUT_BANK = """
import resource, sys
from llp_tf.after_training import run_loader
run = run_loader.load_run(sys.argv[1], with_bank=False)
assert run.bank is None
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def _peak_rss_without_bank(run_dir):
    import subprocess
    import sys

    from tests.cli.tool_main import ROOT

    result = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_BANK, str(run_dir)],
                            capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])


@pytest.mark.slow  # writes a 1 GiB checkpoint and starts two processes
def test_a_run_loaded_without_its_bank_never_reads_it(tiny_llp_run, tmp_path):
    # The same run with the bank of its newest checkpoint grown to 2M rows of 128 floats
    # (1 GiB): loaded without the bank, as the linear probe and a plain export load it, the
    # process's peak stays within 64 MiB of the small bank's.
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_llp_run, run_dir)
    path = tf.train.latest_checkpoint(str(run_dir / "checkpoints"))
    reader = tf.train.load_checkpoint(path)
    names, tensors = [], []
    for name, _ in tf.train.list_variables(path):
        names.append(name)
        if name.startswith("bank/embeddings/"):
            tensors.append(tf.ones([2_000_000, 128], tf.float32))
        else:
            tensors.append(tf.constant(reader.get_tensor(name)))
    small = _peak_rss_without_bank(run_dir)
    tf.raw_ops.SaveV2(prefix=path, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=tensors)
    del tensors
    assert os.path.getsize(path + ".data-00000-of-00001") > 2_000_000 * 128 * 4
    large = _peak_rss_without_bank(run_dir)
    assert large - small < 64 << 20, (small, large)
