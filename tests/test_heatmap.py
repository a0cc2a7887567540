"""Heatmaps tell measured from unmeasured cells and show each cell's confidence interval."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.patches import Rectangle

from colocate.analysis.matrix import build_matrix
from colocate.analysis.plots import draw_matrix, plot_matrix


def _pairs() -> pd.DataFrame:
    """Three job types; a+b measured (δ 1.00 ± 0.40: the colour of 'no effect'), b+c infeasible, a+c and the
    self-pairs not measured."""
    common = dict(gpu_type="cpu", sharing="timeslice", throughput_sum=1.0, gpm_sm_occupancy_mean=math.nan,
                  gpm_dram_bw_util_mean=math.nan)
    return pd.DataFrame([
        dict(common, type_a="a@8", type_b="b@8", status="ok", delta=1.0, delta_ci95=0.4, max_slowdown=2.0,
             slowdown_a=2.0, slowdown_b=2.0),
        dict(common, type_a="b@8", type_b="c@8", status="infeasible", delta=math.nan, delta_ci95=math.nan,
             max_slowdown=math.nan, slowdown_a=math.nan, slowdown_b=math.nan),
    ])


def test_unmeasured_cells_are_marked_and_measured_cells_show_their_ci(tmp_path) -> None:
    matrix = build_matrix(_pairs(), "cpu", "timeslice", job_types=["a@8", "b@8", "c@8"])
    assert matrix.ci95 is not None and matrix.ci95.iat[0, 1] == 0.4
    fig = draw_matrix(matrix)
    ax = fig.axes[0]
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}
    assert texts[(0, 1)].startswith("1.00 ±0.40")
    assert texts[(1, 2)] == "OOM"
    unmeasured = [(0, 0), (0, 2), (1, 1), (2, 2)]
    for cell in unmeasured:
        assert texts[cell] == "not\nmeasured", cell
    patches = {(round(p.get_y() + 0.5), round(p.get_x() + 0.5)): p for p in ax.patches if isinstance(p, Rectangle)}
    for cell in unmeasured:
        patch = patches[cell]
        assert patch.get_hatch() and patch.get_facecolor()[:3] != (1.0, 1.0, 1.0), cell
    assert (0, 1) not in patches  # a measured cell is coloured by its value, not covered
    assert "95 % CI" in ax.get_title() and "not measured" in ax.get_title()
    assert plot_matrix(matrix, tmp_path / "m.png").stat().st_size > 0


def test_a_cell_whose_ci_is_wider_than_its_value_is_not_coloured_like_a_confident_one() -> None:
    """δ 1.00 ± 0.40 is confident enough to colour; δ 0.60 ± 0.45 (an interval of 0.90, wider than 0.60) and a pair
    the repeats disagree on are drawn pale, hatched and marked, and leave no colour in the image."""
    pairs = _pairs()
    unsure = dict(pairs.iloc[0], type_a="a@8", type_b="c@8", delta=0.6, delta_ci95=0.45)
    matrix = build_matrix(pd.concat([pairs, pd.DataFrame([unsure])], ignore_index=True), "cpu", "timeslice",
                          job_types=["a@8", "b@8", "c@8"])
    ax = draw_matrix(matrix).axes[0]
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}
    assert texts[(0, 2)].startswith("0.60 ±0.45") and texts[(0, 2)].endswith("uncertain")
    assert not texts[(0, 1)].endswith("uncertain")
    patches = {(round(p.get_y() + 0.5), round(p.get_x() + 0.5)): p for p in ax.patches if isinstance(p, Rectangle)}
    assert patches[(0, 2)].get_hatch() and (0, 1) not in patches
    image = ax.images[0].get_array()
    assert image.mask[0, 2] and not image.mask[0, 1]  # the uncertain value is not drawn by the colour map
    assert "CI wider than the value" in ax.get_title()


def test_the_title_and_its_legend_fit_inside_the_figure(tmp_path) -> None:
    """The subtitle (what a cell shows, and what pale hatched means) is wrapped to the figure: none of it drawn
    outside, so the "uncertain" legend is readable even on the smallest heatmap."""
    pairs = _pairs()
    unsure = dict(pairs.iloc[0], type_a="a@8", type_b="c@8", delta=0.6, delta_ci95=0.45)
    matrix = build_matrix(pd.concat([pairs, pd.DataFrame([unsure])], ignore_index=True), "cpu", "timeslice",
                          job_types=["a@8", "b@8", "c@8"])
    fig = draw_matrix(matrix)
    fig.canvas.draw()
    title = fig.axes[0].title
    box, frame = title.get_window_extent(), fig.bbox
    assert "pale hatched" in title.get_text()
    assert box.x0 >= frame.x0 and box.x1 <= frame.x1 and box.y1 <= frame.y1, (box, frame)
    plot_matrix(matrix, tmp_path / "m.png")
