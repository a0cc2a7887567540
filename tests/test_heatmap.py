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
