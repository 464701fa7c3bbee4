"""The run's checkpoints: restored past damaged files, saved without losing the last."""

import io
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from llp_tf.errors import ConfigError
from llp_tf.training.checkpoints import (DAMAGED_DIR, CheckpointDamaged, CheckpointWriteFailed,
                                         RunCheckpoints)
from llp_tf.training.run_directory import RunDirectory, checkpoint_step
from tests.cli.tool_main import ROOT


def _checkpoints(tmp_path, value, stream=None):
    return RunCheckpoints({"value": value}, RunDirectory(tmp_path), keep=5,
                          stream=stream or io.StringIO())


def _saved_at(tmp_path, steps):
    """Checkpoints of a [50, 50] variable filled with the step, at each step."""
    value = tf.Variable(tf.zeros([50, 50]))
    checkpoints = _checkpoints(tmp_path, value)
    for step in steps:
        value.assign(tf.fill([50, 50], float(step)))
        checkpoints.save(step)
    return [checkpoints.manager.directory + f"/ckpt-{step}" for step in steps]


def _truncate(path):
    data = path + ".data-00000-of-00001"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)


def test_a_new_run_has_nothing_to_restore(tmp_path):
    assert _checkpoints(tmp_path, tf.Variable(0.0)).restore_latest() is None


def test_a_truncated_newest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    paths = _saved_at(tmp_path, [3, 6, 9])
    _truncate(paths[-1])
    os.remove(paths[-2] + ".index")  # and the one before lost its index
    value, warnings = tf.Variable(tf.zeros([50, 50])), io.StringIO()
    checkpoints = _checkpoints(tmp_path, value, warnings)
    assert checkpoints.restore_latest() == paths[0]
    assert float(value[0, 0]) == 3.0
    text = warnings.getvalue()
    assert f"the checkpoint {paths[2]} cannot be read (Read less bytes than requested)" in text
    assert f"the checkpoint {paths[1]} cannot be read" in text
    aside = os.path.join(str(tmp_path), "checkpoints", DAMAGED_DIR)
    assert sorted(os.listdir(aside)) == ["ckpt-6.data-00000-of-00001", "ckpt-9.data-00000-of-00001",
                                         "ckpt-9.index"]
    # The run goes on from step 3: its list holds the readable checkpoint only,
    # and new checkpoints follow it.
    assert [checkpoint_step(p) for p in RunDirectory(tmp_path).checkpoint_paths()] == [3]
    checkpoints.save(6)
    assert checkpoint_step(RunDirectory(tmp_path).latest_checkpoint()) == 6


def test_a_corrupted_checkpoint_is_detected_by_its_checksum(tmp_path):
    paths = _saved_at(tmp_path, [3, 6])
    data = paths[-1] + ".data-00000-of-00001"
    content = bytearray(open(data, "rb").read())
    content[100:200] = bytes(100)
    open(data, "wb").write(bytes(content))
    value = tf.Variable(tf.zeros([50, 50]))
    assert _checkpoints(tmp_path, value).restore_latest() == paths[0]
    assert float(value[0, 0]) == 3.0


def test_no_readable_checkpoint_is_one_error_naming_the_damaged_files(tmp_path):
    paths = _saved_at(tmp_path, [3, 6])
    for path in paths:
        _truncate(path)
    with pytest.raises(CheckpointDamaged, match=rf"damaged: {paths[1]}.data-00000-of-00001, "
                                                rf"{paths[1]}.index, {paths[0]}.data-"):
        _checkpoints(tmp_path, tf.Variable(tf.zeros([50, 50]))).restore_latest()
    assert os.path.exists(paths[0] + ".index")  # nothing moved when nothing can be used


def test_a_checkpoint_of_other_shapes_is_a_config_error_not_damage(tmp_path):
    _saved_at(tmp_path, [3])
    with pytest.raises(ConfigError, match="does not fit this run's data and model"):
        _checkpoints(tmp_path, tf.Variable(tf.zeros([40, 50]))).restore_latest()


def test_a_failed_write_keeps_the_previous_checkpoint(tmp_path):
    paths = _saved_at(tmp_path, [3])
    value = tf.Variable(tf.zeros([50, 50]))
    checkpoints = _checkpoints(tmp_path, value)
    checkpoints.restore_latest()
    # A file where the write's temporary folder must go (after the restore, which would
    # sweep it as an unfinished save's): the write fails.
    blocker = os.path.join(os.path.dirname(paths[0]), "ckpt-6_temp")
    open(blocker, "w").close()
    with pytest.raises(CheckpointWriteFailed, match=rf"checkpoint of step 6 .*; the previous "
                                                    rf"checkpoint {paths[0]} is intact"):
        checkpoints.save(6)
    assert RunDirectory(tmp_path).checkpoint_paths() == [paths[0]]
    restored = tf.Variable(tf.zeros([50, 50]))
    assert _checkpoints(tmp_path, restored).restore_latest() == paths[0]
    assert float(restored[0, 0]) == 3.0


# Saves step 3, then step 6 under a file-size limit below the checkpoint's size,
# as a full disk would fail it; prints the error.
OUT_OF_SPACE = """
import io, resource, signal, sys
import tensorflow as tf
from llp_tf.training.checkpoints import RunCheckpoints
from llp_tf.training.run_directory import RunDirectory
value = tf.Variable(tf.fill([200, 200], 3.0))
checkpoints = RunCheckpoints({"value": value}, RunDirectory(sys.argv[1]), keep=1,
                             stream=io.StringIO())
checkpoints.save(3)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (50000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
value.assign(tf.fill([200, 200], 6.0))
try:
    checkpoints.save(6)
except Exception as error:
    print(type(error).__name__, error)
"""


def test_a_write_failing_for_lack_of_space_keeps_the_previous_checkpoint(tmp_path):
    result = subprocess.run([sys.executable, "-c", OUT_OF_SPACE, str(tmp_path)],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.stdout.startswith("CheckpointWriteFailed Could not write the checkpoint of "
                                    "step 6"), result.stdout + result.stderr
    assert "File too large" in result.stdout and "ckpt-3 is intact" in result.stdout
    directory = RunDirectory(tmp_path)
    assert [checkpoint_step(p) for p in directory.checkpoint_paths()] == [3]
    assert not any(name.endswith("_temp") for name in os.listdir(directory.checkpoint_dir))
    value = tf.Variable(tf.zeros([200, 200]))
    RunCheckpoints({"value": value}, directory, keep=1, stream=io.StringIO()).restore_latest()
    assert float(value[0, 0]) == 3.0


def test_variable_bytes_count_each_keras_and_tensorflow_variable_once(tmp_path):
    import keras
    layer = keras.layers.Dense(3)
    layer.build((None, 5))  # a kernel of 5 x 3 and a bias of 3, float32
    step = tf.Variable(0, dtype=tf.int64)
    checkpoints = RunCheckpoints({"layer": layer, "same": layer, "step": step,
                                  "kernel": layer.kernel}, RunDirectory(tmp_path), keep=1,
                                 stream=io.StringIO())
    assert checkpoints.variable_bytes() == (5 * 3 + 3) * 4 + 8
    path = checkpoints.save(1)
    # The files hold them and the checkpoint's index and object graph.
    assert sum(os.path.getsize(os.path.join(tmp_path, "checkpoints", name))
               for name in os.listdir(os.path.join(tmp_path, "checkpoints"))
               if name.startswith(os.path.basename(path) + ".")) > (5 * 3 + 3) * 4 + 8


def test_variable_bytes_count_a_sharded_bank_whole(tmp_path, two_replica_strategy):
    from llp_tf.core.sharded_bank import ShardedMemoryBank
    n, d = 13, 4
    bank = ShardedMemoryBank(two_replica_strategy, n, d, 2, [0, 5], [0, 1])
    checkpoints = RunCheckpoints({"bank": bank}, RunDirectory(tmp_path), keep=1,
                                 stream=io.StringIO())
    # embeddings, labels, confidence, is_labelled of 13 rows; 2 densities; labelled_index.
    assert checkpoints.variable_bytes() == n * (d * 4 + 8 + 4 + 1) + 2 * 4 + 2 * 8


def test_a_restore_sweeps_the_files_of_unfinished_saves_and_names_them(tmp_path):
    paths = _saved_at(tmp_path, [3])
    directory = os.path.dirname(paths[0])
    # A save killed before the state recorded it: its files, and TensorFlow's temporary folder.
    for name in ("ckpt-6.index", "ckpt-6.data-00000-of-00001"):
        open(os.path.join(directory, name), "w").close()
    os.makedirs(os.path.join(directory, "ckpt-9_temp"))
    stream = io.StringIO()
    checkpoints = _checkpoints(tmp_path, tf.Variable(tf.zeros([50, 50])), stream)
    assert checkpoints.restore_latest() == paths[0]
    assert stream.getvalue() == (
        f"note: removed the files of unfinished saves, which no checkpoint records, from "
        f"{directory}: ckpt-6.data-00000-of-00001, ckpt-6.index, ckpt-9_temp/\n")
    assert sorted(os.listdir(directory)) == ["checkpoint", "ckpt-3.data-00000-of-00001",
                                             "ckpt-3.index"]
