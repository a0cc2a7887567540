"""Figures: compatibility heatmaps and kernel-profile plots (matplotlib, Agg backend, one PNG each).

Imported lazily by the commands so ``colocate --help`` never loads matplotlib.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from colocate.analysis.results import job_type_sort_key, weighted_mean  # noqa: E402
from profiler.results.schema import STATUS_INFEASIBLE, STATUS_OK  # noqa: E402
from scheduler.report.figures import save_figure  # noqa: E402

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


class MatrixView(Protocol):
    """What a heatmap reads of a :class:`colocate.analysis.matrix.CompatibilityMatrix` (which imports this module)."""

    @property
    def gpu_type(self) -> str: ...

    @property
    def sharing(self) -> str: ...

    @property
    def batch_size(self) -> int | None: ...

    @property
    def metric(self) -> str: ...

    @property
    def job_types(self) -> tuple[str, ...]: ...

    @property
    def values(self) -> pd.DataFrame: ...

    @property
    def status(self) -> pd.DataFrame: ...

    @property
    def slowdown(self) -> pd.DataFrame: ...

    @property
    def occupancy(self) -> pd.DataFrame: ...

    @property
    def dram(self) -> pd.DataFrame: ...

    @property
    def ci95(self) -> pd.DataFrame | None: ...

    @property
    def metric_label(self) -> str: ...



def plot_matrix(matrix: MatrixView, path: str | Path) -> Path:
    """:func:`draw_matrix` written to ``path`` (PNG)."""
    return save_figure(draw_matrix(matrix), path)


def draw_matrix(matrix: MatrixView) -> "plt.Figure":
    """Heatmap of the upper triangle, diverging colormap centred on 1.0, every measured cell annotated.

    Annotation: the metric ± the half-width of its 95 % CI (δ), then the slowdowns t′/t of the row job and
    the column job; with GPM data a third line gives SM occupancy / DRAM bandwidth (%) while co-located.
    Unmeasured cells are dotted grey with "not measured" — never white, which is the colour of δ ≈ 1 —
    infeasible cells hatched grey with "OOM", failed ones "failed"; a cell whose 95 % CI is wider than its value
    is pale and hatched, marked "uncertain", never coloured like a confident one. The lower triangle mirrors
    the upper and is left empty.
    """
    n = len(matrix.job_types)
    values = matrix.values.to_numpy(dtype=float)
    upper = np.triu(np.ones((n, n), dtype=bool))
    unsure = upper & _uncertain(matrix, values)
    shown = np.where(upper & ~unsure, values, np.nan)  # an uncertain value gets no colour of a confident one
    finite = shown[np.isfinite(shown)]
    span = max(float(np.max(np.abs(finite - 1.0))) if finite.size else 0.5, 0.05)
    norm = TwoSlopeNorm(vcenter=1.0, vmin=1.0 - span, vmax=1.0 + span)
    # Blue = good: δ and Σ t/t′ above 1 are good, slowdowns above 1 are bad.
    cmap = plt.get_cmap("RdBu_r" if matrix.metric == "slowdown" else "RdBu").with_extremes(bad="none")
    cell = 1.15 if n <= 8 else 0.75 if n <= 16 else 0.55
    size = max(4.5, cell * n + 2.5)
    font = 8 if n <= 8 else 6 if n <= 16 else 4
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    image = ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, norm=norm)
    has_gpm = bool(np.isfinite(matrix.occupancy.to_numpy(dtype=float)).any())
    for i in range(n):
        for j in range(i, n):
            status = matrix.status.iat[i, j]
            if status != STATUS_OK:
                _blank_cell(ax, i, j, status, font)
                continue
            value = values[i, j]
            if unsure[i, j]:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.97", hatch="\\\\", edgecolor="0.8", lw=0))
                ax.text(j, i, "\n".join([*_cell_lines(matrix, i, j, has_gpm), "uncertain"]), ha="center", va="center",
                        fontsize=font, color="0.35")
                continue
            ax.text(j, i, "\n".join(_cell_lines(matrix, i, j, has_gpm)), ha="center", va="center", fontsize=font,
                    color="white" if abs(value - 1.0) > 0.6 * span else "black")
    labels = list(matrix.job_types)
    ax.set_xticks(range(n), labels, rotation=60, ha="right", fontsize=font + 1)
    ax.set_yticks(range(n), labels, fontsize=font + 1)
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(n - 0.5, -0.5)
    scope = "all job types" if matrix.batch_size is None else f"batch size {matrix.batch_size}"
    ci = " ± 95 % CI" if _has_ci(matrix) else ""
    unsure_note = "; pale hatched: CI wider than the value" if unsure.any() else ""
    legend = f"cells: value{ci}; slowdown t′/t of row job / column job; dotted grey: not measured{unsure_note}"
    # wrapped to the figure's width (about 0.6 em a character at 9 pt): one long line is clipped on both sides
    columns = max(30, int(fig.get_figwidth() * 72 / (9 * 0.6)) - 4)
    ax.set_title(f"{matrix.metric_label} — {matrix.gpu_type}, {matrix.sharing}, {scope}\n"
                 + textwrap.fill(legend, columns), fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=matrix.metric)
    fig.tight_layout()  # room above the axes for however many lines the title took
    return fig


def _uncertain(matrix: MatrixView, values: np.ndarray) -> np.ndarray:
    """Cells whose 95 % confidence interval is wider than the value itself (2 × half-width ≥ |value|): the
    measurement cannot tell a good pair from a bad one, so the cell is not coloured like a confident one."""
    if matrix.ci95 is None:
        return np.zeros(values.shape, dtype=bool)
    ci = matrix.ci95.to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        return np.isfinite(ci) & np.isfinite(values) & (2.0 * ci >= np.abs(values))


def _has_ci(matrix: MatrixView) -> bool:
    return matrix.ci95 is not None and bool(np.isfinite(matrix.ci95.to_numpy(dtype=float)).any())


def _cell_lines(matrix: MatrixView, i: int, j: int, has_gpm: bool) -> list[str]:
    """A measured cell's text: value (± CI half-width), slowdowns, and GPM means when measured."""
    value = matrix.values.iat[i, j]
    ci = matrix.ci95.iat[i, j] if matrix.ci95 is not None else math.nan
    lines = [f"{value:.2f} ±{ci:.2f}" if math.isfinite(ci) else f"{value:.2f}"]
    slow_row, slow_col = matrix.slowdown.iat[i, j], matrix.slowdown.iat[j, i]
    lines.append(f"{slow_row:.2f}×" if i == j else f"{slow_row:.2f}×/{slow_col:.2f}×")
    if has_gpm:
        occupancy, dram = matrix.occupancy.iat[i, j], matrix.dram.iat[i, j]
        if not (math.isnan(occupancy) and math.isnan(dram)):
            lines.append(f"occ {occupancy:.0f}% dram {dram:.0f}%")
    return lines


def _blank_cell(ax: "plt.Axes", i: int, j: int, status: str, font: int) -> None:
    """A cell without a value: unmeasured (dotted), infeasible or failed (hatched), grey either way."""
    measured = bool(status)
    ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.85" if measured else "0.92",
                           hatch="///" if measured else "..", edgecolor="0.6", lw=0))
    label = "OOM" if status == STATUS_INFEASIBLE else status if measured else "not\nmeasured"
    ax.text(j, i, label, ha="center", va="center", fontsize=font, color="0.25")


# --------------------------------------------------------------------------------------------------------
# Kernel profiles (thesis Figs. 4.6–4.9)

KERNEL_METRICS = {
    "occupancy_pct": "occupancy (%)",
    "dram_throughput_pct": "DRAM throughput (% of peak)",
    "sm_throughput_pct": "SM throughput (% of peak)",
}


def kernel_averages(kernels: pd.DataFrame) -> pd.DataFrame:
    """Duration-weighted averages per (GPU type, backend, model, batch size) — the numbers behind the bars."""
    rows = []
    keys = ["gpu_type", "backend", "model", "batch_size"]
    for key, group in kernels.groupby(keys, dropna=False, sort=True):
        row = dict(zip(keys, key))
        row["kernels"] = len(group)
        row["total_duration_us"] = float(group["duration_us"].sum())
        for metric in KERNEL_METRICS:
            row[metric] = weighted_mean(group[metric], group["duration_us"])
        rows.append(row)
    return pd.DataFrame(rows, columns=[*keys, "kernels", "total_duration_us", *KERNEL_METRICS])


def plot_kernel_averages(kernels: pd.DataFrame, out_dir: str | Path) -> tuple[list[Path], list[str]]:
    """Bars of duration-weighted occupancy, DRAM and SM throughput per model (x) and batch size (bars).

    One PNG per metric and GPU type/backend; metrics with no values (DRAM with the torch profiler, anything
    on CPU) are skipped and explained in the returned notes.
    """
    out = Path(out_dir)
    written: list[Path] = []
    notes: list[str] = []
    averages = kernel_averages(kernels)
    for (gpu_type, backend), group in averages.groupby(["gpu_type", "backend"], sort=True):
        models = sorted(group["model"].unique(), key=str.lower)
        batches = sorted(int(b) for b in group["batch_size"].dropna().unique())
        for metric, label in KERNEL_METRICS.items():
            if group[metric].notna().sum() == 0:
                if gpu_type != "cpu":  # on CPU every GPU metric is empty by nature; the command says so once
                    notes.append(f"{gpu_type}/{backend}: no {label} values"
                                 + (" (needs --backend ncu)" if metric != "occupancy_pct" and backend != "ncu" else ""))
                continue
            fig, ax = plt.subplots(figsize=(max(5.0, 1.4 * len(models) + 2), 4))
            width = 0.8 / max(len(batches), 1)
            for k, batch in enumerate(batches):
                heights = [group[(group["model"] == m) & (group["batch_size"] == batch)][metric].mean() for m in models]
                positions = np.arange(len(models)) + (k - (len(batches) - 1) / 2) * width
                ax.bar(positions, np.nan_to_num(heights), width, label=f"batch {batch}")
            ax.set_xticks(range(len(models)), models)
            ax.set_ylabel(f"duration-weighted {label}")
            ax.set_ylim(0, 100)
            ax.legend(fontsize=7, ncols=min(4, len(batches)))
            title = f"Kernel {label}, {gpu_type} ({backend})"
            if metric == "occupancy_pct" and backend != "ncu":
                title += "\noccupancy-calculator estimate (identical alone or co-located)"
            ax.set_title(title, fontsize=9)
            written.append(save_figure(fig, out / f"kernels_avg_{metric}_{gpu_type}_{backend}.png"))
    return written, notes


def plot_kernel_histograms(kernels: pd.DataFrame, out_dir: str | Path) -> tuple[list[Path], list[str]]:
    """Per-kernel histograms with log-scale counts, one PNG per metric and GPU type/backend, a panel per job type.

    Durations are always available (CPU operators too) and are binned on a log axis; percentages on 0–100.
    """
    out = Path(out_dir)
    written: list[Path] = []
    notes: list[str] = []
    metrics = {"duration_us": "duration (µs)", **KERNEL_METRICS}
    for (gpu_type, backend), group in kernels.groupby(["gpu_type", "backend"], sort=True):
        job_types = sorted(group["job_type"].unique(), key=job_type_sort_key)
        for metric, label in metrics.items():
            if group[metric].notna().sum() == 0:
                if gpu_type != "cpu":
                    notes.append(f"{gpu_type}/{backend}: no per-kernel {label} values")
                continue
            columns = min(4, len(job_types))
            rows = math.ceil(len(job_types) / columns)
            fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.6 * rows), squeeze=False, sharex=True)
            if metric == "duration_us":
                positive = group[metric][group[metric] > 0]
                low, high = (positive.min(), positive.max()) if not positive.empty else (1.0, 10.0)
                bins = np.logspace(math.log10(max(low, 1e-3)), math.log10(max(high, low * 10)), 30)
            else:
                bins = np.linspace(0, 100, 21)
            for index, job_type in enumerate(job_types):
                ax = axes[index // columns][index % columns]
                data = group[(group["job_type"] == job_type)][metric].dropna()
                ax.hist(data, bins=bins, color="tab:blue")
                ax.set_yscale("log")
                if metric == "duration_us":
                    ax.set_xscale("log")
                ax.set_title(f"{job_type} ({len(data)} rows)", fontsize=8)
                ax.tick_params(labelsize=7)
            for index in range(len(job_types), rows * columns):
                axes[index // columns][index % columns].axis("off")
            fig.supxlabel(label, fontsize=9)
            unit = "CPU operator (self time)" if gpu_type == "cpu" else "kernel"
            fig.supylabel("count (log scale)", fontsize=9)
            suffix = " — occupancy-calculator estimate" if metric == "occupancy_pct" and backend != "ncu" else ""
            fig.suptitle(f"Per-{unit} {label}, {gpu_type} ({backend}){suffix}", fontsize=9)
            written.append(save_figure(fig, out / f"kernels_hist_{metric}_{gpu_type}_{backend}.png"))
    return written, notes


def plot_gpu_comparison(pairs: pd.DataFrame, type_a: str, type_b: str, path: str | Path) -> Path:
    """δ of each pair on ``type_a`` (x) against ``type_b`` (y), one colour per sharing-mode pairing: points off
    the diagonal moved, points across a dashed line (δ = 1) are worth packing on one type only."""
    fig, ax = plt.subplots(figsize=(5.5, 5.0))
    for (mode_a, mode_b), group in pairs.groupby(["sharing_a", "sharing_b"], sort=True):
        label = mode_a if mode_a == mode_b else f"{mode_a} / {mode_b}"
        ax.scatter(group["delta_a"], group["delta_b"], s=18, alpha=0.75, label=label)
    values = pd.concat([pairs["delta_a"], pairs["delta_b"]]).astype(float)
    low, high = min(float(values.min()), 1.0) * 0.95, max(float(values.max()), 1.0) * 1.05
    ax.plot([low, high], [low, high], color="grey", linewidth=0.8)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel(f"δ on {type_a}")
    ax.set_ylabel(f"δ on {type_b}")
    ax.set_title(f"pairs measured on both ({len(pairs)})")
    ax.legend(title="sharing", fontsize=8)
    return save_figure(fig, path)
