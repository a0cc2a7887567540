"""JCT across load: the table, the plot and the targets of a comparison run at several arrival rates.

A *load* is a multiple of the workload's own arrival rate (:meth:`scheduler.formats.workloads.Workload.at_load`:
arrival times divided by the load, same jobs). ``frame`` is :func:`scheduler.report.comparison.summary_frame` with a
``load`` column; every figure is the mean over the workloads of a load point.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def machine_description() -> str:
    """The machine a report ran on, read from the machine: OS, CPU model and cores, Python."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} logical CPUs, "
            f"Python {platform.python_version()} (host {platform.node()})")


def run_date() -> str:
    """Now, UTC, to the minute (when the report was written)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def load_means(frame: Any) -> Any:
    """Mean avg/p99 JCT (hours) and workload count per (load, policy)."""
    g = frame.groupby(["load", "policy"])
    out = g[["avg_jct_s", "p99_jct_s"]].mean() / 3600.0
    out["workloads"] = g.size()
    return out.reset_index()


def load_table(frame: Any, policies: Sequence[str]) -> list[str]:
    """Markdown: one row per policy, avg / p99 JCT (h) at each load."""
    means = load_means(frame)
    loads = sorted(means["load"].unique())
    lines = ["| policy | " + " | ".join(f"{x:g}× avg / p99 (h)" for x in loads) + " |",
             "|---|" + "---|" * len(loads)]
    for p in policies:
        cells = []
        for x in loads:
            row = means[(means["load"] == x) & (means["policy"] == p)]
            cells.append("–" if row.empty else f"{row['avg_jct_s'].iloc[0]:.2f} / {row['p99_jct_s'].iloc[0]:.1f}")
        lines.append(f"| `{p}` | " + " | ".join(cells) + " |")
    counts = sorted({int(n) for n in means["workloads"]})
    lines += ["", f"Workloads per load point: {', '.join(map(str, counts))}."]
    return lines


def plot_jct_vs_load(frame: Any, policies: Sequence[str], path: Path) -> Path:
    """Average (left) and p99 (right) JCT against load, one line per policy."""
    from scheduler.report.figures import pyplot, save_figure

    plt = pyplot()
    means = load_means(frame)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, metric, label in ((axes[0], "avg_jct_s", "average JCT (h)"), (axes[1], "p99_jct_s", "p99 JCT (h)")):
        for p in policies:
            rows = means[means["policy"] == p].sort_values("load")
            if len(rows):
                ax.plot(rows["load"], rows[metric], marker="o", label=p)
        ax.set_xlabel("load (× the workload's arrival rate)")
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("JCT across load")
    return save_figure(fig, path)


def _ratio(means: Any, load: float, metric: str, a: str, b: str) -> float:
    va = means[(means["load"] == load) & (means["policy"] == a)][metric]
    vb = means[(means["load"] == load) & (means["policy"] == b)][metric]
    if va.empty or vb.empty or not vb.iloc[0] > 0:
        return math.nan
    return float(va.iloc[0] / vb.iloc[0])


def load_target_lines(frame: Any) -> list[str]:
    """The issue's targets for ``colocate`` across load, each with its measured ratio and pass/miss."""
    means = load_means(frame)
    loads = sorted(means["load"].unique())
    lines = ["| target | load | measured | |", "|---|---|---|---|"]

    def row(text: str, load: float, value: float, bound: float) -> None:
        ok = "n/a" if math.isnan(value) else ("met" if value <= bound + 1e-12 else "**missed**")
        shown = "–" if math.isnan(value) else f"{value:.2f}×"
        lines.append(f"| {text} | {load:g}× | {shown} | {ok} |")

    for x in loads:
        if x == 1:
            row("avg JCT ≤ 0.95× `sia`", x, _ratio(means, x, "avg_jct_s", "colocate", "sia"), 0.95)
        if x >= 2:
            row("avg JCT ≤ 0.70× `sia`", x, _ratio(means, x, "avg_jct_s", "colocate", "sia"), 0.70)
        row("p99 JCT ≤ `sia`'s", x, _ratio(means, x, "p99_jct_s", "colocate", "sia"), 1.0)
        row("avg JCT ≤ 0.4× `gavel-sia`", x, _ratio(means, x, "avg_jct_s", "colocate", "gavel-sia"), 0.4)
    return lines


__all__ = ["load_means", "load_table", "load_target_lines", "machine_description", "plot_jct_vs_load", "run_date"]
