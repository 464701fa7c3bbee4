"""llp_tf/after_training/export/export_summary.py: the lines about what an export wrote
(the export itself: test_saved_model.py, tests/cli/test_export_tool.py)."""

from llp_tf import tool_names
from llp_tf.after_training.export import export_summary

INFO = {
    "image_size": 32, "serving_default": "classify",
    "signatures": {"classify": {"top5": {"dtype": "int32", "shape": [None, 5],
                                         "doc": "best classes"}}},
    "onnx": {"file": "model.onnx", "opset": 17,
             "input": {"images": {"dtype": "float32", "shape": [None, 32, 32, 3]}},
             "outputs": {"probabilities": {"dtype": "float32", "shape": [None, 10]}}},
}


def test_the_lines_name_the_folder_its_size_each_signature_and_the_onnx_model(tmp_path,
                                                                           monkeypatch):
    (tmp_path / "saved_model.pb").write_bytes(b"\0" * (3 * 1024 * 1024 // 2))  # 1.5 MB
    lines = export_summary.written_lines(INFO, str(tmp_path), include_onnx=True)
    assert lines[0] == f"Wrote {tmp_path} (1.5 MB) with export_info.json"
    assert "centre-cropped to 32 px" in lines[1]
    assert lines[2:5] == ["Signatures:",
                          "  classify(images uint8 [B, H, W, C]) (also serving_default) ->",
                          "    top5: int32 [None, 5]  best classes"]
    assert lines[5] == (f"ONNX model {tmp_path}/model.onnx (opset 17): images float32 "
                        "[None, 32, 32, 3] preprocessed (llp_tf.after_training.export."
                        "onnx_model.preprocess_for_onnx) -> probabilities float32 [None, 10]")
    assert lines[6] == f"Try it: llp-predict --model_dir={tmp_path} IMAGE.png"
    # As a checkout's tools/export.py prints it.
    monkeypatch.setenv(tool_names.CHECKOUT_VARIABLE, "/src/llp-tf")
    assert export_summary.written_lines(INFO, str(tmp_path), include_onnx=False)[-1] == \
        f"Try it: tools/predict.py --model_dir={tmp_path} IMAGE.png"
    assert len(export_summary.written_lines(INFO, str(tmp_path), include_onnx=False)) == 6


def test_an_export_with_model_keras_names_it_its_input_outputs_and_how_to_load_it(tmp_path):
    info = {**INFO, "keras": {
        "file": "model.keras", "load": "import m; keras.saving.load_model(path)",
        "input": {"images": {"dtype": "float32", "shape": "[B, 32, 32, 3]"}},
        "outputs": {"embedding": {"dtype": "float32", "shape": "[B, 128]"},
                    "logits": {"dtype": "float32", "shape": "[B, 10]"}}}}
    lines = export_summary.written_lines(info, str(tmp_path), include_onnx=False)
    assert lines[5] == (f"Keras model {tmp_path}/model.keras: images float32 [B, 32, 32, 3] "
                        "preprocessed (llp_tf.after_training.export.onnx_model."
                        "preprocess_for_onnx) -> embedding [B, 128], logits [B, 10]; "
                        "load with: import m; keras.saving.load_model(path)")
    assert len(lines) == 7
