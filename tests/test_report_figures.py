"""The comparison report's figures, read from their matplotlib objects: the JCT CDF's hour ticks are plain
numbers (not 10^x), the packed-fraction chart shows a bar whose value is 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pandas as pd

from scheduler.report import comparison
from scheduler.report.comparison import SimulationRecord, plot_jct_cdf, plot_packed_fraction


def _drawn(plot: Any, *args: Any) -> Any:
    """The figure ``plot`` draws (kept open: saving is stubbed out)."""
    figures = []
    with mock.patch.object(comparison, "_save", side_effect=lambda fig, path: figures.append(fig) or path):
        plot(*args)
    return figures[0]


def test_the_jct_cdf_labels_hours_as_plain_numbers(tmp_path: Path) -> None:
    jobs = pd.DataFrame({"completed": [True] * 4, "jct_s": [360.0, 3600.0, 36000.0, 360000.0]})
    run = SimulationRecord("w", "colocate", {}, jobs, pd.DataFrame())
    fig = _drawn(plot_jct_cdf, [run], tmp_path / "cdf.png")
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels and all("10^" not in t and "$" not in t and "e" not in t for t in labels), labels
    assert {"0.1", "1", "10", "100"} <= set(labels), labels


def test_the_packed_fraction_chart_shows_a_zero_bar(tmp_path: Path) -> None:
    frame = pd.DataFrame({"policy": ["colocate", "sia"], "workload": ["w0", "w0"], "packed_fraction": [0.4, 0.0]})
    fig = _drawn(plot_packed_fraction, frame, tmp_path / "packed.png")
    ax = fig.axes[0]
    bars = ax.patches
    assert len(bars) == 2 and all(b.get_linewidth() > 0 for b in bars)  # outlined: a zero bar is a visible line
    assert ax.get_ylim()[0] < 0  # ... above the axis line
    assert [t.get_text() for t in ax.texts] == ["0"]  # and labelled 0
