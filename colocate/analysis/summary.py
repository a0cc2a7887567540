"""Per-cell summaries over repeats: mean and 95 % CI of δ, Σ t/t′, slowdowns and solo iteration times."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from profiler.gpu.sharing import sharing_label
from profiler.measure.metrics import mean_ci
from profiler.results.schema import STATUS_OK


def _floats(column: pd.Series) -> list[float]:
    return [float(x) for x in pd.to_numeric(column, errors="coerce").dropna()]


def cell_summary(runs: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: status, repeats, δ and Σ t/t′ (mean, CI half-width), per-job slowdowns, solo t."""
    rows: list[dict[str, Any]] = []
    if runs.empty:
        return pd.DataFrame(rows)
    for cell_id, cell_runs in runs.groupby("cell_id", sort=False):
        first = cell_runs.iloc[0]
        ok = cell_runs[cell_runs["status"] == STATUS_OK]
        cell_jobs = jobs[jobs["run_id"].isin(ok["run_id"])]
        delta = mean_ci(_floats(ok["delta"]))
        tput = mean_ci(_floats(ok["throughput_sum"]))
        times = mean_ci(_floats(cell_jobs["iter_time_s"])) if first["kind"] == "solo" else None
        slowdowns = []
        for _, job_rows in cell_jobs.groupby("job_index"):
            slowdowns.append(mean_ci(_floats(job_rows["slowdown"])).mean)
        errors = [str(e) for e in cell_runs["error"] if isinstance(e, str) and e]
        rows.append({
            "cell_id": cell_id,
            "kind": first["kind"],
            # a typed cell ("h100:pair|...") was routed to that type; else the device's own type
            "gpu_type": str(cell_id).split(":", 1)[0] if ":" in str(cell_id).split("|", 1)[0] else first["gpu_type"],
            "mode": sharing_label(first["sharing"], first.get("mps_thread_percentage")),
            "job_types": first["job_types"],
            "repeats": len(cell_runs),
            "ok": len(ok),
            "status": STATUS_OK if len(ok) else str(cell_runs.iloc[-1]["status"]),
            "delta": delta.mean,
            "delta_ci": delta.half_width,
            "throughput_sum": tput.mean,
            "throughput_sum_ci": tput.half_width,
            "slowdowns": slowdowns,
            "solo_iter_time_s": times.mean if times else math.nan,
            "solo_iter_time_ci": times.half_width if times else math.nan,
            "error": errors[-1] if errors else "",
        })
    return pd.DataFrame(rows)


def format_ci(mean: float, half: float, digits: int = 3) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "—"
    if half is None or math.isnan(half):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {half:.{digits}f}"
