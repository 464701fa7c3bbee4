"""llp_tf/training/method_comparison.py: the table and each run's last evaluation (the
runs themselves: tests/cli/test_compare_methods_tool.py)."""

import pytest

from llp_tf.training import method_comparison


def test_the_table_has_each_runs_last_top1_their_mean_and_spread(tmp_path):
    results = {"llp": {"0": 0.8, "1": 0.9}, "supervised": {"0": 0.7, "1": 0.6}}
    assert method_comparison.table(results, ["0", "1"]).splitlines() == [
        "| method | seed 0 | seed 1 | mean | spread |",
        "| --- | --- | --- | --- | --- |",
        "| llp | 0.800 | 0.900 | 0.850 | 0.100 |",
        "| supervised | 0.700 | 0.600 | 0.650 | 0.100 |"]
    # The last evaluation row counts; a torn last line (a run killed mid-write) does not.
    (tmp_path / "metrics.jsonl").write_text(
        '{"epoch": 1, "val_top1": 0.5}\n{"epoch": 2, "nan": 1}\n{"epoch": 2, "val_top1": 0.75}'
        '\n{"epo')
    assert method_comparison.last_evaluation(str(tmp_path)) == {"epoch": 2, "val_top1": 0.75}
    assert method_comparison.last_evaluation(str(tmp_path / "absent")) is None


def test_a_run_of_an_earlier_version_is_read_under_todays_names(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        '{"epoch": 2, "step": 10, "train_loss": 1.5, "top1": 0.75, "examples": 40.0}\n')
    assert method_comparison.last_evaluation(str(tmp_path)) == {
        "epoch": 2, "step": 10, "loss": 1.5, "val_top1": 0.75, "val_examples": 40}
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1, "val_top1": 0.5}\n{"epo\n{}\n')
    with pytest.raises(method_comparison.ComparisonError,
                       match=r"Line 2 of .*metrics.jsonl is not JSON"):
        method_comparison.last_evaluation(str(tmp_path))


def test_mean_teachers_student_has_a_row_beside_its_teacher():
    row = {"epoch": 40, "val_top1": 0.81, "val_student_top1": 0.78, "val_top5": 0.99}
    assert method_comparison.table_rows("mean_teacher", row) == {
        "mean_teacher": 0.81, "mean_teacher (student)": 0.78}
    assert method_comparison.table_rows("llp", {"val_top1": 0.8, "val_nn_top1": 0.7}) == {
        "llp": 0.8}


def test_a_fraction_tests_only_the_orderings_of_methods_that_ran():
    """LLP and supervised only, at p10: of LLP > MT > supervised only LLP > supervised is
    tested; differences 0.05, 0.01, 0.09 have a 95% interval of 0.05 +- 4.303 x 0.04 /
    sqrt(3), over 0 and wider than the margin: not resolved."""
    top1 = {"llp": {"0": 0.85, "1": 0.81, "2": 0.89},
            "supervised": {"0": 0.80, "1": 0.80, "2": 0.80}}
    summary = method_comparison.fraction_summary("p10", top1, {}, ["0", "1", "2"], 0.02)
    assert [claim["claim"] for claim in summary["claims"]] == ["llp > supervised"]
    claim = summary["claims"][0]
    half = 4.302652729749462 * 0.04 / 3 ** 0.5
    assert claim["ci95"] == pytest.approx([0.05 - half, 0.05 + half], abs=1e-12)
    assert (claim["relation"], claim["verdict"], summary["verdict"]) == (
        "not resolved", "not resolved", "not resolved")
    assert summary["labelled_per_class"] == 128
    lines = method_comparison.fraction_table("p10", summary, ["0", "1", "2"]).splitlines()
    assert lines[0] == "p10: 128 labelled images a class"
    assert lines[-1] == "- p10 as the paper orders it: not resolved"
