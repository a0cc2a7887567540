"""Load one or several results directories into tidy tables for analysis.

A results directory (README, "Output files") holds ``runs.parquet``, ``jobs.parquet``, optionally ``kernels.parquet``
and ``meta.json``. The profiler writes them; ``colocate import-gavel`` writes the same shape from Gavel's
published throughputs, so matrices, the predictor and the exporters treat measured and imported data alike.

Three derived tables feed everything downstream:

* :func:`solo_table` — one row per (GPU type, image size, job type): solo iteration time t, peak memory,
  NVML/GPM utilization and, when a kernel profile exists, duration-weighted occupancy and DRAM throughput.
* :func:`group_table` — one row per measured group (pair or triple) per (GPU type, sharing mode), over its
  repeats: status, mean δ and its 95 % confidence interval, Σ t/t′, and each job's ratio t/t′ and slowdown
  t′/t. Job types inside a group are put in a canonical order (:func:`job_type_sort_key`) so (a, b) and
  (b, a) measured in different campaigns are the same pair.

GPU types are never mixed: every table carries ``gpu_type`` and every join uses it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from common.errors import InputError
from profiler.campaign.spec import parse_job_type
from profiler.gpu.sharing import sharing_label
from profiler.results.schema import (
    JOB_COLUMNS,
    JOB_NUMERIC,
    JOBS_FILE,
    KERNEL_COLUMNS,
    KERNEL_NUMERIC,
    RUN_COLUMNS,
    RUN_NUMERIC,
    RUNS_FILE,
    STATUS_FAILED,
    STATUS_INFEASIBLE,
    STATUS_OK,
    STATUS_SKIPPED,
)
from profiler.results.store import read_results_dir

# Device-wide counters summarised per run (NVML / GPM); shown beside δ and used as predictor features.
UTILIZATION_COLUMNS = ("gpu_util_mean", "gpm_sm_occupancy_mean", "gpm_sm_util_mean", "gpm_dram_bw_util_mean")

# Status precedence when repeats of one cell disagree: one good measurement makes the cell measured.
_STATUS_ORDER = (STATUS_OK, STATUS_INFEASIBLE, STATUS_FAILED, STATUS_SKIPPED)

# Two-sided 95 % Student-t quantiles by degrees of freedom (n − 1); 1.96 beyond the table.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(dof: int) -> float:
    """Two-sided 95 % Student-t quantile for ``dof`` degrees of freedom (conservative between table rows)."""
    if dof < 1:
        return math.nan
    if dof > max(_T95):
        return 1.96
    return _T95[max(bound for bound in _T95 if bound <= dof)]


@dataclass(frozen=True)
class ResultsSet:
    """Rows of one or several results directories, concatenated; ``results_dir`` says where each came from."""

    runs: pd.DataFrame
    jobs: pd.DataFrame
    kernels: pd.DataFrame
    meta: tuple[dict[str, Any], ...]
    sources: tuple[Path, ...]

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted(self.runs["gpu_type"].dropna().unique()))

    @property
    def label(self) -> str:
        return ", ".join(str(p) for p in self.sources)


# --------------------------------------------------------------------------------------------------------
# Job types


@functools.lru_cache(maxsize=65536)  # pure; imports of 100,000 pair rows ask for a few hundred types
def split_job_type(job_type: str) -> tuple[str, int | None]:
    """``"resnet18@64"`` → ``("resnet18", 64)``; a type without a batch size (Gavel's A3C) → ``(name, None)``.

    Stored rows are read leniently: :func:`profiler.campaign.spec.parse_job_type` with ``strict=False``.
    """
    return parse_job_type(job_type, strict=False)


def job_type_sort_key(job_type: str) -> tuple[str, int, str]:
    """Order job types by model name, then numerically by batch size (so @64 sorts before @128), then by the
    whole name (``resnet50@64`` before ``resnet50@64:bf16``, its precision variant)."""
    model, batch = split_job_type(job_type)
    return (model.lower(), -1 if batch is None else batch, job_type)


def sort_job_types(job_types: Iterable[str]) -> list[str]:
    return sorted(set(job_types), key=job_type_sort_key)


# --------------------------------------------------------------------------------------------------------
# Reading


def _coerce(frame: pd.DataFrame, columns: Sequence[str], numeric: Sequence[str]) -> pd.DataFrame:
    frame = frame.copy()
    for column in columns:
        if column not in frame.columns:
            frame[column] = pd.NA
    for column in numeric:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    for column in columns:
        if column not in numeric:
            frame[column] = frame[column].astype("object").where(frame[column].notna(), None)
    return frame


def empty_kernels() -> pd.DataFrame:
    return _coerce(pd.DataFrame(columns=list(KERNEL_COLUMNS)), KERNEL_COLUMNS, KERNEL_NUMERIC)


def load_results(paths: str | Path | Sequence[str | Path]) -> ResultsSet:
    """Read one or several results directories (:func:`profiler.results.store.read_results_dir`); raise a one-line
    :class:`InputError` for anything unusable.

    Errors: a path that is not a directory, a directory without ``runs.parquet``, unreadable or schema-less
    files, no runs at all, the same cell measured on one GPU type at two image sizes (mismatched inputs).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise InputError("no results directory given", field="RESULTS_DIR", valid="one or more directories")
    dirs = []
    for raw in paths:
        found = read_results_dir(raw)
        dirs.append(found)
        if found.runs.empty:
            raise InputError("has no runs (empty campaign)", source=found.root / RUNS_FILE,
                             valid="a campaign with at least one run")
    return results_from_frames([d.runs for d in dirs], [d.jobs for d in dirs],
                               [d.kernels for d in dirs if not d.kernels.empty], [d.meta for d in dirs],
                               [d.root for d in dirs])


def results_from_frames(
    runs_parts: Sequence[pd.DataFrame], jobs_parts: Sequence[pd.DataFrame], kernel_parts: Sequence[pd.DataFrame],
    metas: Sequence[dict[str, Any]], sources: Sequence[Path],
) -> ResultsSet:
    """Assemble a :class:`ResultsSet` from per-source frames (directories, or an in-memory Gavel import)."""
    prepared_runs, prepared_jobs = [], []
    for runs, jobs, source in zip(runs_parts, jobs_parts, sources):
        runs = _coerce(runs, RUN_COLUMNS, RUN_NUMERIC)
        duplicated = runs["run_id"][runs["run_id"].duplicated()]
        if not duplicated.empty:
            raise InputError(f"run_id {duplicated.iloc[0]} appears more than once", source=Path(source) / RUNS_FILE,
                             field="run_id", valid="one row per run (the profiler keys rows by run id; was the file edited?)")
        runs["results_dir"] = str(source)
        jobs = _coerce(jobs, JOB_COLUMNS, JOB_NUMERIC)
        jobs["results_dir"] = str(source)
        prepared_runs.append(runs)
        prepared_jobs.append(jobs)
    runs = pd.concat(prepared_runs, ignore_index=True)
    jobs = pd.concat(prepared_jobs, ignore_index=True)
    kernels = (pd.concat([_coerce(k, KERNEL_COLUMNS, KERNEL_NUMERIC) for k in kernel_parts], ignore_index=True)
               if kernel_parts else empty_kernels())
    # Jobs of a run share its GPU type, image size and sharing mode: bring them over once here.
    run_keys = runs[["results_dir", "run_id", "gpu_type", "image_size", "sharing", "mps_thread_percentage", "kind"]]
    jobs = jobs.drop(columns=[c for c in ("gpu_type", "image_size", "sharing", "mps_thread_percentage", "kind")
                              if c in jobs.columns])
    jobs = jobs.merge(run_keys, on=["results_dir", "run_id"], how="left")
    runs["sharing_label"] = [sharing_label(s, p) for s, p in zip(runs["sharing"], runs["mps_thread_percentage"])]
    jobs["sharing_label"] = [sharing_label(s, p) for s, p in zip(jobs["sharing"], jobs["mps_thread_percentage"])]
    result = ResultsSet(runs=runs, jobs=jobs, kernels=kernels, meta=tuple(metas), sources=tuple(Path(s) for s in sources))
    _check_image_sizes(result)
    return result


def combine_results(parts: Sequence[ResultsSet]) -> ResultsSet:
    """Several loaded sets as one (e.g. our campaign directories and an in-memory Gavel import)."""
    if len(parts) == 1:
        return parts[0]
    result = ResultsSet(
        runs=pd.concat([p.runs for p in parts], ignore_index=True),
        jobs=pd.concat([p.jobs for p in parts], ignore_index=True),
        kernels=pd.concat([p.kernels for p in parts if not p.kernels.empty], ignore_index=True)
        if any(not p.kernels.empty for p in parts) else empty_kernels(),
        meta=tuple(m for p in parts for m in p.meta), sources=tuple(s for p in parts for s in p.sources),
    )
    _check_image_sizes(result)
    return result


def _check_image_sizes(results: ResultsSet) -> None:
    """Refuse to merge directories where one GPU type saw the same job type at two input sizes."""
    solo = results.jobs[results.jobs["kind"] == "solo"]
    if solo.empty:
        return
    sizes = solo.groupby(["gpu_type", "job_type"], dropna=False)["image_size"].nunique()
    clashes = sizes[sizes > 1]
    if not clashes.empty:
        gpu_type, job_type = clashes.index[0]
        found = sorted(solo[(solo["gpu_type"] == gpu_type) & (solo["job_type"] == job_type)]["image_size"].unique())
        raise InputError(
            f"job type {job_type} on {gpu_type} was measured at image sizes {found}: these are different "
            "workloads and cannot share one matrix", source=results.label, field="image_size",
            valid="results directories with one image size per GPU type (analyse the others separately)",
        )


# --------------------------------------------------------------------------------------------------------
# Derived tables


SOLO_COLUMNS = (
    "gpu_type",
    "image_size",
    "job_type",
    "model",
    "batch_size",
    "solo_iter_time_s",
    "solo_iter_time_ci95_s",
    "solo_repeats",
    "peak_memory_mib",
    *UTILIZATION_COLUMNS,
    "kernel_occupancy_pct",
    "kernel_dram_throughput_pct",
    "kernel_sm_throughput_pct",
)


def kernel_summary(kernels: pd.DataFrame) -> pd.DataFrame:
    """Duration-weighted mean occupancy / DRAM / SM throughput per (GPU type, job type) — thesis Figs. 4.6/4.8."""
    columns = ["gpu_type", "job_type", "kernel_occupancy_pct", "kernel_dram_throughput_pct", "kernel_sm_throughput_pct"]
    if kernels.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for (gpu_type, job_type), group in kernels.groupby(["gpu_type", "job_type"], dropna=False):
        row: dict[str, Any] = {"gpu_type": gpu_type, "job_type": job_type}
        for source, target in (("occupancy_pct", "kernel_occupancy_pct"),
                               ("dram_throughput_pct", "kernel_dram_throughput_pct"),
                               ("sm_throughput_pct", "kernel_sm_throughput_pct")):
            row[target] = weighted_mean(group[source], group["duration_us"])
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def weighted_mean(values: pd.Series, weights: pd.Series) -> float:
    """Mean of ``values`` weighted by ``weights`` over rows where both are known; NaN when none are."""
    mask = values.notna() & weights.notna() & (weights > 0)
    if not mask.any():
        return math.nan
    return float(np.average(values[mask].astype(float), weights=weights[mask].astype(float)))


def solo_table(results: ResultsSet) -> pd.DataFrame:
    """Solo baselines per GPU type and job type, over all ok solo repeats in all given directories."""
    jobs = results.jobs[(results.jobs["kind"] == "solo") & (results.jobs["status"] == STATUS_OK)
                        & (results.jobs["iter_time_s"] > 0)]
    base_columns = [c for c in SOLO_COLUMNS if not c.startswith("kernel_")]
    if jobs.empty:
        solo = pd.DataFrame(columns=base_columns)
    else:
        runs = results.runs[["results_dir", "run_id", *UTILIZATION_COLUMNS]]
        jobs = jobs.drop(columns=[c for c in UTILIZATION_COLUMNS if c in jobs.columns])
        jobs = jobs.merge(runs, on=["results_dir", "run_id"], how="left")
        keys = ["gpu_type", "image_size", "job_type"]
        solo = jobs.groupby(keys, dropna=False, sort=False).agg(
            model=("model", "first"), batch_size=("batch_size", "first"),
            solo_iter_time_s=("iter_time_s", "mean"), _std=("iter_time_s", "std"), solo_repeats=("iter_time_s", "size"),
            peak_memory_mib=("peak_memory_mib", "max"), **{c: (c, "mean") for c in UTILIZATION_COLUMNS},
        ).reset_index()
        solo["solo_iter_time_ci95_s"] = [t95(n - 1) * sd / math.sqrt(n) if n > 1 else math.nan
                                         for n, sd in zip(solo["solo_repeats"], solo["_std"])]
        solo["model"] = [m if isinstance(m, str) and m else split_job_type(str(j))[0]
                         for m, j in zip(solo["model"], solo["job_type"])]
        solo = solo[base_columns]
    summary = kernel_summary(results.kernels)
    solo = solo.merge(summary, on=["gpu_type", "job_type"], how="left")
    for column in SOLO_COLUMNS:
        if column not in solo.columns:
            solo[column] = math.nan
    solo = solo[list(SOLO_COLUMNS)]
    order = sorted(range(len(solo)),
                   key=lambda i: (str(solo["gpu_type"].iloc[i]), job_type_sort_key(str(solo["job_type"].iloc[i]))))
    return solo.iloc[order].reset_index(drop=True)


_SLOTS = ("a", "b", "c")


def group_columns(size: int) -> list[str]:
    columns = ["gpu_type", "sharing", "image_size", "kind", "job_types"]
    columns += [f"type_{s}" for s in _SLOTS[:size]]
    columns += ["status", "error", "repeats", "delta", "delta_ci95", "throughput_sum", "max_slowdown"]
    columns += [f"ratio_{s}" for s in _SLOTS[:size]]
    columns += [f"slowdown_{s}" for s in _SLOTS[:size]]
    columns += list(UTILIZATION_COLUMNS) + ["sm_clock_mean_mhz", "results_dir"]
    return columns


def group_table(results: ResultsSet, size: int = 2, *, require_baselines: bool = True) -> pd.DataFrame:
    """One row per measured group of ``size`` jobs per (GPU type, sharing mode), over its repeats.

    Job types inside a group are sorted (:func:`job_type_sort_key`) and ratios follow them. A job's ratio is
    t/t′ from ``jobs.parquet``; when the profiler left ``solo_iter_time_s`` empty the solo baseline of the
    same GPU type is used, and an ok group whose job has no solo baseline anywhere is an input error
    (``require_baselines``; otherwise such runs are dropped), since neither δ nor the ratios exist without it.
    Vectorised: 1,000 runs take well under a second.
    """
    kind = {2: "pair", 3: "triple"}[size]
    slots = _SLOTS[:size]
    columns = group_columns(size)
    runs = results.runs[(results.runs["kind"] == kind) & (results.runs["job_types"].str.count(r"\+") == size - 1)]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    runs = runs.copy()
    runs["canonical"] = ["+".join(sorted(str(j).split("+"), key=job_type_sort_key)) for j in runs["job_types"]]
    for slot, index in zip(slots, range(size)):
        runs[f"type_{slot}"] = runs["canonical"].str.split("+").str[index]
    key = ["results_dir", "run_id"]
    ok_runs = runs[runs["status"] == STATUS_OK]
    per_run = runs[key + ["gpu_type", "sharing_label", "image_size", "canonical", "status", "error",
                          *[f"type_{s}" for s in slots], *UTILIZATION_COLUMNS, "sm_clock_mean_mhz"]].copy()
    if not ok_runs.empty:
        per_run = _with_ratios(results, ok_runs, per_run, size, require_baselines=require_baselines)
    for column in ("delta", "throughput_sum", "max_slowdown", *[f"ratio_{s}" for s in slots], *[f"slowdown_{s}" for s in slots]):
        if column not in per_run.columns:
            per_run[column] = math.nan
    if per_run.empty:
        return pd.DataFrame(columns=columns)
    return _summarise_groups(per_run, size, columns)


def _with_ratios(results: ResultsSet, ok_runs: pd.DataFrame, per_run: pd.DataFrame, size: int, *,
                 require_baselines: bool) -> pd.DataFrame:
    """``per_run`` plus δ, Σ t/t′, the slowdowns and each slot's ratio for the ok runs (t from the solo table
    when the profiler left it empty); runs without a baseline are an error or dropped (``require_baselines``)."""
    kind = {2: "pair", 3: "triple"}[size]
    slots = _SLOTS[:size]
    key = ["results_dir", "run_id"]
    jobs = results.jobs.merge(ok_runs[key], on=key, how="inner")
    solo = solo_table(results)[["gpu_type", "job_type", "solo_iter_time_s"]].rename(
        columns={"solo_iter_time_s": "_solo_fallback"})
    jobs = jobs.merge(solo, on=["gpu_type", "job_type"], how="left")
    t = jobs["solo_iter_time_s"].where(jobs["solo_iter_time_s"] > 0, jobs["_solo_fallback"])
    jobs = jobs.assign(_t=t, _tp=jobs["iter_time_s"])
    counts = jobs.groupby(key).size().reindex(pd.MultiIndex.from_frame(ok_runs[key]), fill_value=0)
    if (counts != size).any():
        wrong = counts[counts != size]
        bad = wrong.index[0]
        raise InputError(
            f"run {bad[1]} is ok but has {int(wrong.iloc[0])} job rows for {size} jobs", source=Path(bad[0]) / JOBS_FILE,
            field="run_id", valid="one jobs.parquet row per job of every run",
        )
    missing = jobs["_t"].isna() | ~(jobs["_t"] > 0) | ~(jobs["_tp"] > 0)
    if missing.any():
        if require_baselines:
            bad_job = jobs[missing].iloc[0]
            raise InputError(
                f"{kind} {bad_job['run_id']} on {bad_job['gpu_type']} has no solo baseline for {bad_job['job_type']}",
                source=Path(bad_job["results_dir"]) / JOBS_FILE, field="solo_iter_time_s",
                valid=f"a solo run of {bad_job['job_type']} on {bad_job['gpu_type']} in the given results directories",
            )
        bad_runs = jobs.loc[missing, key].drop_duplicates()
        jobs = jobs.merge(bad_runs.assign(_bad=True), on=key, how="left")
        jobs = jobs[jobs["_bad"].isna()]
        dropped = per_run.merge(bad_runs.assign(_bad=True), on=key, how="left")["_bad"].notna().to_numpy()
        per_run = per_run[~dropped]
    jobs = jobs.assign(_ratio=jobs["_t"] / jobs["_tp"], _slowdown=jobs["_tp"] / jobs["_t"],
                       _sort=jobs["job_type"].map(job_type_sort_key))
    jobs = jobs.sort_values(key + ["_sort", "job_index"])
    jobs["_slot"] = jobs.groupby(key).cumcount()
    aggregates = jobs.groupby(key).agg(_sum_t=("_t", "sum"), _max_tp=("_tp", "max"),
                                       throughput_sum=("_ratio", "sum"), max_slowdown=("_slowdown", "max"))
    aggregates["delta"] = aggregates["_sum_t"] / aggregates["_max_tp"]
    wide_ratio = jobs.pivot_table(index=key, columns="_slot", values="_ratio", aggfunc="first")
    wide_slow = jobs.pivot_table(index=key, columns="_slot", values="_slowdown", aggfunc="first")
    for index, slot in enumerate(slots):
        aggregates[f"ratio_{slot}"] = wide_ratio[index]
        aggregates[f"slowdown_{slot}"] = wide_slow[index]
    per_run = per_run.merge(aggregates.drop(columns=["_sum_t", "_max_tp"]).reset_index(), on=key, how="left")
    return per_run


def _summarise_groups(per_run: pd.DataFrame, size: int, columns: list[str]) -> pd.DataFrame:
    """One row per (GPU type, sharing, image size, group): status by precedence, means and a 95 % CI of δ."""
    kind = {2: "pair", 3: "triple"}[size]
    slots = _SLOTS[:size]
    per_run = per_run.rename(columns={"sharing_label": "sharing", "canonical": "job_types"})
    per_run["_rank"] = per_run["status"].map({s: i for i, s in enumerate(_STATUS_ORDER)}).fillna(len(_STATUS_ORDER))
    per_run["_ok"] = per_run["status"] == STATUS_OK
    group_keys = ["gpu_type", "sharing", "image_size", "job_types"]
    ok = per_run[per_run["_ok"]]
    value_columns = ["throughput_sum", "max_slowdown", *[f"ratio_{s}" for s in slots], *[f"slowdown_{s}" for s in slots],
                     *UTILIZATION_COLUMNS, "sm_clock_mean_mhz"]
    grouped = per_run.groupby(group_keys, dropna=False, sort=False)
    table = grouped.agg(**{f"type_{s}": (f"type_{s}", "first") for s in slots},
                        _rank=("_rank", "min"), results_dir=("results_dir", lambda v: ";".join(sorted(set(v)))))
    table["status"] = [(_STATUS_ORDER + ("unknown",))[int(r)] for r in table["_rank"]]
    not_ok = per_run[~per_run["_ok"] & (per_run["error"].fillna("") != "")]
    table["error"] = not_ok.groupby(group_keys, dropna=False, sort=False)["error"].first().reindex(table.index).fillna("")
    table.loc[table["status"] == STATUS_OK, "error"] = ""
    ok_grouped = ok.groupby(group_keys, dropna=False, sort=False)
    stats = ok_grouped.agg(repeats=("delta", "size"), delta=("delta", "mean"), _std=("delta", "std"),
                           **{c: (c, "mean") for c in value_columns})
    stats["delta_ci95"] = [t95(n - 1) * s / math.sqrt(n) if n > 1 else math.nan
                           for n, s in zip(stats["repeats"], stats["_std"])]
    table = table.join(stats.drop(columns=["_std"]), how="left")
    table["repeats"] = table["repeats"].fillna(0).astype(int)
    table["kind"] = kind
    table = table.reset_index()
    return table[columns].sort_values(["gpu_type", "sharing", "job_types"]).reset_index(drop=True)


# --------------------------------------------------------------------------------------------------------
# Writing (used by import-gavel and the kernel profiler's command)


def typed_frame(rows: list[dict[str, Any]], columns: Sequence[str], numeric: Sequence[str]) -> pd.DataFrame:
    """Rows → a DataFrame with exactly ``columns``; numbers as float64, the rest as strings or None."""
    return _coerce(pd.DataFrame(rows, columns=list(columns)), columns, numeric)


def choose_sharing(modes: Iterable[str], sharing: str | None, source: str) -> str | None:
    """The one sharing mode to use for single-mode outputs (colocation table, Gavel export).

    ``sharing`` when given (must be present); otherwise the only mode present; several → an input error
    asking the user to pick. None when there are no pairs at all.
    """
    present = sorted(set(modes))
    if sharing is not None:
        if sharing not in present:
            raise InputError(f"no pairs measured with sharing '{sharing}'", source=source, field="--sharing",
                             valid=", ".join(present) or "none: the inputs have no pairs")
        return sharing
    if len(present) > 1:
        raise InputError(f"the inputs hold several sharing modes ({', '.join(present)}) and this output has one",
                         source=source, field="--sharing", valid=", ".join(present))
    return present[0] if present else None
