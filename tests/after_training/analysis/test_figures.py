import dataclasses

import numpy as np
import pytest

from llp_tf.after_training.analysis import figures as figures_lib
from tests.after_training.analysis.analysis_results import bank_state, run_analysis

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def figures(monkeypatch):
    """Every figure the drawing functions create, in order."""
    created = []
    new_figure = figures_lib._new_figure

    def recording(width, height):
        created.append(new_figure(width, height))
        return created[-1]

    monkeypatch.setattr(figures_lib, "_new_figure", recording)
    return created


def _legend_texts(axes):
    return [text.get_text() for text in axes.get_legend().get_texts()]


def _is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == PNG_MAGIC


def test_histogram_of_the_latest_and_first_kept_checkpoints(figures, tmp_path):
    path = tmp_path / "histogram.png"
    figures_lib.draw_histogram(run_analysis(), str(path))
    axes = figures[0].axes[0]
    assert _legend_texts(axes) == ["step 10 (epoch 1): mean 0.450",
                                   "step 20 (epoch 2): mean 0.533"]
    # 4 classes: 2 * ceil(sqrt(4)) = 4 bins, raised to MIN_BINS; the first
    # checkpoint is one outline, the latest one bar per bin; one class per bin.
    assert len(axes.patches) == figures_lib.MIN_BINS + 1
    assert axes.get_ylim()[1] == pytest.approx(figures_lib.HISTOGRAM_HEADROOM)
    assert _is_png(path)


def test_trajectory_draws_a_line_per_class_or_a_band(figures, tmp_path):
    figures_lib.draw_trajectory(run_analysis(), str(tmp_path / "few.png"))
    overview, detail = figures[0].axes[:2]
    np.testing.assert_array_equal(overview.lines[0].get_ydata(), [0.3, 0.35, 0.5, 0.45])
    assert _legend_texts(detail) == ["0", "cat (1)", "dog (3)"]
    # The classes with rows, the mean, and the LLP boundary at epoch 2.
    assert len(detail.lines) == 3 + 2
    assert not detail.collections
    count = figures_lib.MAX_CLASS_LINES + 1
    states = [bank_state(step, np.linspace(0.1, 0.9, count) + shift)
              for step, shift in ((10, 0.0), (20, 0.05))]
    many = dataclasses.replace(run_analysis(class_names=[f"c{i}" for i in range(count)]),
                               latest=states[1], trajectory=states)
    figures_lib.draw_trajectory(many, str(tmp_path / "many.png"))
    detail = figures[1].axes[1]
    assert _legend_texts(detail) == ["10-90th percentile of classes", "median class"]
    assert len(detail.lines) == 3 and len(detail.collections) == 1
    assert _is_png(tmp_path / "few.png") and _is_png(tmp_path / "many.png")


def test_trajectory_without_kept_checkpoints_has_one_panel(figures, tmp_path):
    figures_lib.draw_trajectory(run_analysis(trajectory=False), str(tmp_path / "t.png"))
    assert len(figures[0].axes) == 1
    assert "mean at latest checkpoint" in _legend_texts(figures[0].axes[0])


def test_mds_scatter_names_each_class_and_its_rows(figures, tmp_path):
    figures_lib.draw_mds(run_analysis(), str(tmp_path / "mds.png"))
    axes = figures[0].axes[0]
    assert _legend_texts(axes) == ["cat (1) (2)", "dog (3) (2)", " ", "unlabelled", "labelled"]
    assert axes.get_title().endswith("Stress-1 0.123")
    # Per class, its unlabelled rows then its labelled ones.
    assert [len(c.get_offsets()) for c in axes.collections] == [1, 1, 2, 0]
    assert _is_png(tmp_path / "mds.png")
