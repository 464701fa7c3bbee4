"""One export of `tiny_llp_run`, with knn and ONNX, shared by the export tests."""

import pytest


@pytest.fixture(scope="session")
def tiny_llp_export(tiny_llp_run, tmp_path_factory):
    """(SavedModel directory, export info dict) of `tiny_llp_run` exported with
    the knn signature and model.onnx; do not write into it."""
    from llp_tf.data.sources.registry import load_source
    from llp_tf.after_training import run_loader
    from llp_tf.after_training.export import saved_model
    run = run_loader.load_run(tiny_llp_run)
    class_names = load_source(run.config.data.dataset,
                                   run.config.data.data_dir).info.class_names
    model_dir = str(tmp_path_factory.mktemp("export") / "model")
    return model_dir, saved_model.export_run(run, class_names, model_dir, include_knn=True,
                                             include_onnx=True)
