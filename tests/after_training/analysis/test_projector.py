import dataclasses
import os

import numpy as np
import pytest

from llp_tf.after_training.analysis import projector, report
from llp_tf.errors import ConfigError
from tests.after_training.analysis.analysis_results import run_analysis


def test_a_small_bank_is_written_whole_a_large_one_sampled_by_its_seed():
    np.testing.assert_array_equal(projector.sample_rows(7, 7, seed=0), np.arange(7))
    rows = projector.sample_rows(1000, 40, seed=1)
    assert rows.dtype == np.int64 and rows.size == 40
    assert np.all(np.diff(rows) > 0) and 0 <= rows.min() and rows.max() < 1000
    np.testing.assert_array_equal(rows, projector.sample_rows(1000, 40, seed=1))
    assert not np.array_equal(rows, projector.sample_rows(1000, 40, seed=2))
    assert projector.sample_rows(1000, 0, seed=1).size == 0


def _sample():
    """Bank rows 0-4 of 3 classes; row 3's label is an instance id (3 + its row)."""
    bank = {"embeddings": np.eye(5, 4, dtype=np.float32), "labels": np.array([0, 2, 1, 6, 2]),
            "confidence": np.array([1.0, 0.5, 0.25, 0.0, 0.125], np.float32),
            "is_labelled": np.array([True, False, False, False, True])}
    return projector.sample_bank(
        lambda rows: {name: values[rows] for name, values in bank.items()}, num_rows=5,
        true_classes=np.array([0, 1, 1, 2, 2]), used_index=np.array([10, 11, 12, 13, 14]),
        class_names=("cat", "two\twords", "dog\n"), max_rows=4, seed=0)


def test_metadata_names_each_rows_class_by_name_and_keeps_one_line_per_row():
    sample = _sample()
    rows = sample.rows.tolist()
    assert len(rows) == 4
    want = {0: "cat\tyes\t1.0000\tcat\t0\t10", 1: "dog\tno\t0.5000\ttwo words\t1\t11",
            2: "two words\tno\t0.2500\ttwo words\t2\t12", 3: "none\tno\t0.0000\tdog\t3\t13",
            4: "dog\tyes\t0.1250\tdog\t4\t14"}
    assert projector.metadata_lines(sample) == [
        "class\tlabelled\tconfidence\ttrue_class\tbank_row\texample"] + [want[r] for r in rows]
    np.testing.assert_array_equal(sample.embeddings, np.eye(5, 4, dtype=np.float32)[rows])


def test_a_row_of_unknown_true_class_says_none_not_the_last_class():
    sample = dataclasses.replace(_sample(), true_classes=np.array([-1, 1, 1, 2]))
    assert [line.split("\t")[3] for line in projector.metadata_lines(sample)[1:]] == [
        "none", "two words", "two words", "dog"]


def test_the_report_writes_the_projector_and_a_report_without_it_removes_the_earlier(tmp_path):
    with_projector = dataclasses.replace(run_analysis(), projector=_sample())
    written = report.write_report(with_projector, str(tmp_path))
    for name in report.PROJECTOR_FILES:
        assert os.path.getsize(written[name]) > 0
    with open(tmp_path / "projector" / "embeddings.tsv") as f:
        assert len(f.read().splitlines()) == 4
    written = report.write_report(run_analysis(), str(tmp_path))
    assert set(written) == set(report.REPORT_FILES)
    assert os.listdir(tmp_path / "projector") == []


def test_a_strangers_projector_files_are_not_replaced(tmp_path):
    (tmp_path / "projector").mkdir()
    (tmp_path / "projector" / "metadata.tsv").write_text("mine\n")
    with pytest.raises(ConfigError, match="holds projector/metadata.tsv of no earlier"):
        report.write_report(dataclasses.replace(run_analysis(), projector=_sample()),
                            str(tmp_path))
    assert (tmp_path / "projector" / "metadata.tsv").read_text() == "mine\n"
