"""llp_tf/after_training/predict.py: the parts that need no model (classifying with an
exported model: tests/cli/test_predict_tool.py)."""

import io

import numpy as np

from llp_tf.after_training import predict


def test_arguments_expand_to_each_image_once_in_order(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("b.png", "a.JPG", "notes.txt", "sub/c.gif"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "empty").mkdir()
    paths, problems = predict.expand_arguments(
        [str(tmp_path / "sub"), str(tmp_path / "*.png"), str(tmp_path), str(tmp_path / "x.bmp"),
         str(tmp_path / "empty")])
    assert paths == [str(tmp_path / "sub" / "c.gif"), str(tmp_path / "b.png"),
                     str(tmp_path / "a.JPG"), str(tmp_path / "x.bmp")]
    assert problems == [f"{tmp_path / 'empty'}: the directory holds no PNG, JPEG, GIF or BMP "
                        "file"]


def test_top_classes_keep_the_lower_class_first_at_a_tie():
    probabilities = np.array([0.25, 0.5, 0.25], np.float32)
    assert predict.top_classes(probabilities, ["a", "b", "c"], 5) == [
        (1, 1, "b", 0.5), (2, 0, "a", 0.25), (3, 2, "c", 0.25)]


def test_csv_rows_follow_their_header():
    stream = io.StringIO()
    predict.ResultWriter(stream, "csv").write("x.png", [(1, 1, "b", 0.5)])
    assert stream.getvalue() == "path,rank,class,name,probability\nx.png,1,1,b,0.5\n"
