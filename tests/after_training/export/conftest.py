"""One export of `tiny_llp_run`, with knn, ONNX and Keras, shared by the export tests."""

import pytest

from tests.session_cache import shared


@pytest.fixture(scope="session")
def tiny_llp_export(tiny_llp_run, tmp_path_factory):
    """(SavedModel directory, export info dict) of `tiny_llp_run` exported with
    the knn signature, model.onnx and model.keras, once for all the test run's workers
    (`tests.session_cache.shared`); do not write into it."""
    def export(folder):
        from llp_tf.after_training import run_loader
        from llp_tf.after_training.export import saved_model
        from llp_tf.data.sources.registry import load_source
        run = run_loader.load_run(tiny_llp_run)
        class_names = load_source(run.config.data.dataset,
                                  run.config.data.data_dir).info.class_names
        model_dir = str(folder / "model")
        return model_dir, saved_model.export_run(run, class_names, model_dir,
                                                 include_knn=True, include_onnx=True,
                                                 include_keras=True)

    model_dir, info = shared(tmp_path_factory, "tiny_llp_export", export)
    return model_dir, info
