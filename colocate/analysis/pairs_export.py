"""The recommended format for sharing co-location measurements: one tidy CSV + a JSON with units and provenance.

``pairs.csv`` has one row per GPU type, sharing mode and unordered pair of job types — the colocation table
and the compatibility matrix in long form — under the column names :mod:`colocate.analysis.pairs_import` reads
without any mapping, so ``colocate import-pairs pairs.csv`` reads an export back. Its first lines are ``#``
comments with the units; ``pairs.json`` carries the same rows plus units and provenance (GPU name, sharing
mode, batch sizes, repeats, 95 % CI, the results directories, their campaign protocol and versions).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from colocate.analysis.results import ResultsSet, group_table, solo_table, split_job_type
from common.errors import InputError
from common.files import atomic_write_text

FORMAT = "colocate-pairs/1"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
UNITS = {
    "time_a": "s per iteration, job a alone (mean over solo repeats)",
    "time_b": "s per iteration, job b alone",
    "colocated_time_a": "s per iteration, job a sharing the GPU with b (t'_a = t_a / speed_a)",
    "colocated_time_b": "s per iteration, job b sharing the GPU with a",
    "speed_a": "t_a / t'_a = co-located / solo throughput of job a (1 = no slowdown; 0 = infeasible)",
    "speed_b": "t_b / t'_b",
    "delta": "(t_a + t_b) / max(t'_a, t'_b): > 1 means sharing beats running back to back",
    "delta_ci95": "half-width of the 95 % Student-t confidence interval of delta over repeats",
    "throughput_sum": "speed_a + speed_b (Gavel's normalized throughput)",
    "memory_a": "MiB, job a's peak memory alone", "memory_b": "MiB, job b's peak memory alone",
    "utilization_a": "%, NVML utilization.gpu of job a alone (time any kernel ran; not occupancy)",
    "utilization_b": "%, the same for job b",
    "batch_a": "samples per iteration of job a", "batch_b": "samples per iteration of job b",
    "repeats": "measured repeats of the pair",
}
COLUMNS = ("gpu_type", "gpu_name", "sharing", "job_a", "job_b", "batch_a", "batch_b", "status", "repeats",
           "time_a", "time_b", "colocated_time_a", "colocated_time_b", "speed_a", "speed_b", "delta", "delta_ci95",
           "throughput_sum", "memory_a", "memory_b", "utilization_a", "utilization_b", "source")


def _gpu_names(results: ResultsSet) -> dict[str, str]:
    runs = results.runs
    if runs.empty or "gpu_name" not in runs:
        return {}
    return {str(g): ";".join(sorted({str(n) for n in group["gpu_name"].dropna()}))
            for g, group in runs.groupby("gpu_type")}


def tidy_pairs(results: ResultsSet) -> pd.DataFrame:
    """One row per measured pair (ok or infeasible) with both jobs' solo and co-located figures."""
    pairs = group_table(results, 2)
    if pairs.empty:
        raise InputError("no pair measurements", source=results.label, field="kind",
                         valid="results with pairs (group_sizes including 2)")
    solo = solo_table(results).drop_duplicates(["gpu_type", "job_type"]).set_index(["gpu_type", "job_type"])
    names = _gpu_names(results)
    rows = []
    for p in pairs[pairs["status"].isin(["ok", "infeasible"])].itertuples(index=False):
        row: dict[str, Any] = {"gpu_type": p.gpu_type, "gpu_name": names.get(str(p.gpu_type), ""),
                               "sharing": p.sharing, "job_a": p.type_a, "job_b": p.type_b, "status": p.status,
                               "repeats": int(p.repeats), "source": p.results_dir}
        ok = p.status == "ok"
        for side, job, ratio in (("a", p.type_a, p.ratio_a), ("b", p.type_b, p.ratio_b)):
            base = solo.loc[(p.gpu_type, job)] if (p.gpu_type, job) in solo.index else None
            t = float(base["solo_iter_time_s"]) if base is not None else math.nan
            row[f"batch_{side}"] = split_job_type(job)[1]
            row[f"time_{side}"] = t
            row[f"speed_{side}"] = float(ratio) if ok else 0.0
            row[f"colocated_time_{side}"] = t / float(ratio) if ok and ratio > 0 else math.nan
            row[f"memory_{side}"] = float(base["peak_memory_mib"]) if base is not None else math.nan
            row[f"utilization_{side}"] = float(base["gpu_util_mean"]) if base is not None else math.nan
        row.update(delta=p.delta if ok else math.nan, delta_ci95=p.delta_ci95 if ok else math.nan,
                   throughput_sum=p.throughput_sum if ok else math.nan)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.dropna(axis=1, how="all").astype({"repeats": int})


def _provenance(results: ResultsSet) -> list[dict[str, Any]]:
    out = []
    for source, meta in zip(results.sources, results.meta):
        meta = meta or {}
        spec = meta.get("spec") or {}
        out.append({
            "results_dir": str(source), "campaign": meta.get("campaign") or spec.get("name"),
            "source": meta.get("source"),
            "protocol": {k: spec.get(k) for k in ("device", "image_size", "warmup_iters", "min_window_iters",
                                                    "min_window_seconds", "repeats", "sharing") if k in spec},
            "versions": meta.get("versions"), "device": meta.get("device"),
            "platform": (meta.get("host") or {}).get("platform"),  # not the host or user name
        })
    return out


def check_export_targets(out_csv: str | Path, results_dirs: Sequence[str | Path], gavel_files: Sequence[str | Path]
                         ) -> None:
    """Refuse, before anything is read or written, an export that would land in a state directory, on a
    directory, under a file, or over one of its own inputs (a results directory's tables, a Gavel file)."""
    from profiler.campaign.outdir import check_out_file
    from profiler.results.schema import JOBS_FILE, KERNELS_FILE, META_FILE, RUNS_FILE

    csv_path = Path(out_csv)
    names = {RUNS_FILE, JOBS_FILE, KERNELS_FILE, META_FILE}
    names |= {Path(n).with_suffix(".csv").name for n in (RUNS_FILE, JOBS_FILE, KERNELS_FILE)}
    inputs = {(Path(d) / n).resolve() for d in results_dirs for n in names} | {Path(g).resolve() for g in gavel_files}
    for target in (csv_path, csv_path.with_suffix(".json")):
        check_out_file(target)
        if target.resolve() in inputs:
            raise InputError("would overwrite one of the export's own inputs", source=target, field="--out",
                             valid="a path outside the input files, e.g. RESULTS_DIR/pairs_export.csv")


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Text cells a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, a tab or a
    carriage return: a job name such as ``=cmd|' /C calc'!A0``) get a leading ``'``, which spreadsheets show
    as text; numbers are left as they are. ``import-pairs`` drops that ``'`` again."""
    out = frame.copy()
    for column in out.columns:
        if not pd.api.types.is_numeric_dtype(out[column]):
            out[column] = out[column].map(lambda v: f"'{v}" if isinstance(v, str) and v[:1] in FORMULA_STARTS else v)
    return out


def export_pairs(results: ResultsSet, out_csv: str | Path) -> tuple[Path, Path]:
    """Write ``out_csv`` (tidy, ``#`` unit lines first; text cells :func:`spreadsheet_safe`) and the JSON beside it
    (same stem, the values as they are). Returns both paths."""
    frame = tidy_pairs(results)
    csv_path = Path(out_csv)
    json_path = csv_path.with_suffix(".json")
    header = [f"# {FORMAT}: co-located pairs, one row per GPU type, sharing mode and pair; units and provenance "
              f"in {json_path.name}"]
    header += [f"# {column}: {UNITS[column]}" for column in frame.columns if column in UNITS]
    atomic_write_text(csv_path, "\n".join(header) + "\n" + spreadsheet_safe(frame).to_csv(index=False))
    document = {
        "format": FORMAT, "units": {c: UNITS[c] for c in frame.columns if c in UNITS},
        "provenance": _provenance(results),
        "pairs": json.loads(frame.to_json(orient="records")),
    }
    atomic_write_text(json_path, json.dumps(document, indent=1, default=str) + "\n")
    return csv_path, json_path
