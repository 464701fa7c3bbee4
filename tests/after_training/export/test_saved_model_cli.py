"""The export through TensorFlow's C++ SavedModel loader, as servers load it:
the real ``saved_model_cli run`` on every signature, against Python's
``tf.saved_model.load``. The runs of ``saved_model_cli`` (five processes) are slow: make
test keeps the signatures' outputs, dtypes and refusals through ``tf.saved_model.load``
(here and in test_saved_model.py) and a fresh process loading the export
(test_saved_model.py)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.after_training.export import saved_model

# Each run starts TensorFlow (about 4 s of CPU); they run side by side.
CLI_TIMEOUT_SECONDS = 120
SAVED_MODEL_CLI = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
UNBATCHED = "unbatched"
BATCH_MESSAGE = "add a batch dimension"
# The same graph in a session (saved_model_cli) and in eager function calls.
TOLERANCE = 1e-5


def _start_cli(model_dir, signature, inputs_path, outdir):
    """A running ``saved_model_cli run`` of one signature on an .npy file."""
    return subprocess.Popen(
        [SAVED_MODEL_CLI, "run", "--dir", model_dir, "--tag_set", "serve",
         "--signature_def", signature, "--inputs", f"images={inputs_path}",
         "--outdir", str(outdir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""})


def _finish(process):
    """(exit code, stderr) of a `_start_cli` process, killed by its pid after
    `CLI_TIMEOUT_SECONDS`."""
    try:
        _, stderr = process.communicate(timeout=CLI_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"saved_model_cli (pid {process.pid}) ran over {CLI_TIMEOUT_SECONDS} s")
    return process.returncode, stderr


@pytest.fixture(scope="module")
def images():
    """uint8 [3, 20, 24, 3]: not the model's 16 px, so the resize runs."""
    return np.random.default_rng(7).integers(0, 256, (3, 20, 24, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def loaded(tiny_llp_export):
    return tf.saved_model.load(tiny_llp_export[0])


@pytest.fixture(scope="module")
def cli_runs(tiny_llp_export, loaded, images, tmp_path_factory):
    """name -> (exit code, stderr, outdir) of ``saved_model_cli run``: one run
    per signature on `images`, and `UNBATCHED`, classify on one [H, W, C] image."""
    assert os.path.isfile(SAVED_MODEL_CLI), f"{SAVED_MODEL_CLI} is missing (TensorFlow installs it)"
    model_dir = tiny_llp_export[0]
    folder = tmp_path_factory.mktemp("saved_model_cli")
    np.save(folder / "images.npy", images)
    np.save(folder / "image.npy", images[0])
    jobs = {name: (folder / "images.npy", name) for name in loaded.signatures}
    jobs[UNBATCHED] = (folder / "image.npy", saved_model.CLASSIFY)
    processes = {name: _start_cli(model_dir, signature, inputs, folder / name)
                 for name, (inputs, signature) in jobs.items()}
    return {name: _finish(process) + (folder / name,) for name, process in processes.items()}


@pytest.mark.slow
def test_every_signature_is_run_by_saved_model_cli(loaded, cli_runs):
    assert set(loaded.signatures) == {"embed", "classify", "knn", "serving_default"}
    for name in loaded.signatures:
        code, stderr, outdir = cli_runs[name]
        assert code == 0, f"{name}: {stderr[-2000:]}"
        assert "Could not find variable" not in stderr
        assert sorted(os.listdir(outdir)) == sorted(
            f"{key}.npy" for key in loaded.signatures[name].structured_outputs), name


@pytest.mark.slow
@pytest.mark.parametrize("signature", ["embed", "classify", "knn", "serving_default"])
def test_saved_model_cli_gives_the_outputs_of_tf_saved_model_load(
        loaded, images, cli_runs, signature):
    expected = loaded.signatures[signature](images=tf.constant(images))
    outdir = cli_runs[signature][2]
    for key, value in expected.items():
        value = value.numpy()
        # String outputs are object arrays of bytes, which np.save pickles.
        written = np.load(outdir / f"{key}.npy", allow_pickle=value.dtype == object)
        assert written.dtype == value.dtype and written.shape == value.shape, key
        if value.dtype.kind == "f":
            np.testing.assert_allclose(written, value, rtol=TOLERANCE, atol=TOLERANCE,
                                       err_msg=key)
        else:
            np.testing.assert_array_equal(written, value, err_msg=key)


def test_outputs_have_the_documented_dtypes_and_class_indices_are_int64(
        tiny_llp_export, loaded, images):
    with open(os.path.join(tiny_llp_export[0], saved_model.EXPORT_INFO_FILE)) as f:
        documented = json.load(f)["signatures"]
    for signature, outputs in documented.items():
        result = loaded.signatures[signature](images=tf.constant(images))
        assert set(result) == set(outputs), signature
        for key, spec in outputs.items():
            assert result[key].dtype.name == spec["dtype"], (signature, key)
            assert result[key].shape[0] == len(images)
    for signature, key in (("classify", "top5_classes"), ("knn", "neighbor_rows"),
                           ("knn", "neighbor_classes"), ("knn", "knn_class")):
        assert documented[signature][key]["dtype"] == "int64", (signature, key)


@pytest.mark.slow
def test_an_unbatched_image_is_refused_with_advice(loaded, images, cli_runs):
    code, stderr, _ = cli_runs[UNBATCHED]
    assert code != 0 and BATCH_MESSAGE in stderr
    assert "strided_slice" not in stderr and "out of bounds" not in stderr
    image = tf.constant(images[0])
    for call in (lambda: loaded.signatures["classify"](images=image),
                 lambda: loaded.knn(image)):
        with pytest.raises(tf.errors.InvalidArgumentError, match=BATCH_MESSAGE) as raised:
            call()
        assert "[20 24 3]" in str(raised.value)  # the shape received


def test_each_variable_is_saved_once(run, tiny_llp_export):
    """The saver writes the variables the graph reads, not also a copy of each
    Keras variable; the module adds class_names and the two bank variables."""
    stored = tf.train.list_variables(os.path.join(tiny_llp_export[0], "variables",
                                                  "variables"))
    keys = [name for name, _ in stored if name != "_CHECKPOINTABLE_OBJECT_GRAPH"]
    assert len(keys) == len(run.model.variables) + 3
