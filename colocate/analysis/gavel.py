"""Interop with Gavel's throughput files (Narayanan et al., OSDI'20; github.com/stanford-futuredata/gavel).

Gavel publishes measured training throughputs (steps/s) per worker type, alone and for co-located pairs::

    {"v100": {"('ResNet-18 (batch size 64)', 1)": {"null": <alone>,
                                                    "('LM (batch size 20)', 1)": [<this job>, <other job>]}}}

The older ``oracle_throughputs.json`` keys jobs by name only (``"ResNet-18 (batch size 64)"``). A pair
value ``[0, 0]`` means the two jobs cannot share the GPU (out of memory). Only scale factor 1 (one GPU per
job) holds pairs of single-GPU jobs, so that is what we import by default; the ``*_unconsolidated`` worker
types repeat the consolidated values for scale factor 1 and are skipped.

:func:`import_gavel` turns such a file into rows of our results schema (a solo run per job type, a pair run
per pair; t = 1 / throughput), so every analysis reads Gavel's data and ours the same way.
:func:`export_gavel` writes our measurements in Gavel's format (``simulation_throughputs.json`` layout) so
Gavel's simulator and policies can consume them.

Gavel ran co-located jobs as concurrent processes on one GPU without stating MPS; the import records
those pairs as sharing mode ``timeslice`` (CUDA's default for two processes) and says so in meta.json.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from colocate.analysis.results import (
    ResultsSet,
    choose_sharing,
    combine_results,
    group_table,
    load_results,
    results_from_frames,
    solo_table,
    sort_job_types,
    split_job_type,
    typed_frame,
)
from common.errors import InputError
from common.files import atomic_write_json
from common.files import atomic_write_table as atomic_write_parquet
from profiler.gpu.sharing import SHARING_SOLO
from profiler.results.schema import (
    JOB_COLUMNS,
    JOB_NUMERIC,
    JOBS_FILE,
    META_FILE,
    RUN_COLUMNS,
    RUN_NUMERIC,
    RUNS_FILE,
    STATUS_INFEASIBLE,
    STATUS_OK,
)
from scheduler.formats.gavel_format import gavel_job_type, parse_gavel_key, read_gavel_json, throughput_value

GAVEL_SHARING = "timeslice"
GPU_NAMES = {"k80": "Tesla K80", "p100": "Tesla P100", "v100": "Tesla V100"}
_EQUAL_REL_TOL = 1e-9


@dataclass(frozen=True)
class GavelImport:
    """Gavel's throughputs as rows of our schema, plus what was read and skipped (for meta.json)."""

    runs: pd.DataFrame
    jobs: pd.DataFrame
    meta: dict[str, Any]


def gavel_job_name(job_type: str) -> str:
    """Inverse of :func:`gavel_job_type`: ``"resnet18@64"`` → ``"resnet18 (batch size 64)"``."""
    model, batch = split_job_type(job_type)
    return model if batch is None else f"{model} (batch size {batch})"


def import_gavel(
    path: str | Path, *, scale_factor: int = 1, gpu_types: tuple[str, ...] | None = None
) -> GavelImport:
    """Convert a Gavel throughput file into runs/jobs rows of our results schema.

    One solo run per (worker type, job type) with t = 1/throughput (a zero throughput is recorded as
    infeasible), and one pair run per unordered pair with t′ = 1/co-located throughput, δ and Σ t/t′.
    Where the file's two directions of a pair disagree (the oracle file has a few), both are kept as two
    repeats of the pair.
    """
    path = Path(path)
    data = read_gavel_json(path)
    available = sorted(g for g in data if not g.endswith("_unconsolidated"))
    if gpu_types is not None:
        unknown = [g for g in gpu_types if g not in data]
        if unknown:
            raise InputError(f"worker type '{unknown[0]}' not in the file", source=path, field="gpu_type",
                             valid=", ".join(available))
        chosen = list(gpu_types)
    else:
        chosen = available
    if not chosen:
        raise InputError("has no worker type to import (only unconsolidated ones)", source=path, field="<top level>",
                         valid="a worker type such as v100 (Gavel's *_unconsolidated entries are not measurements)")
    campaign = f"gavel-{path.stem}"
    runs: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    counts: dict[str, dict[str, int]] = {}
    for gpu in chosen:
        entries, names = _scale_factor_entries(data[gpu], path, gpu, scale_factor)
        solo: dict[str, float] = {}
        counted = {"job_types": 0, "pairs": 0, "infeasible_pairs": 0, "asymmetric_pairs": 0, "zero_solo": 0}
        for job_type in sort_job_types(entries):
            key, entry = entries[job_type]
            if "null" not in entry:
                raise InputError("no isolated ('null') throughput", source=path, field=f"{gpu}.{key}.null",
                                 valid="every job entry has a 'null' key with its solo steps/s")
            throughput = throughput_value(entry["null"], path, f"{gpu}.{key}.null")
            solo[job_type] = throughput
            counted["job_types"] += 1
            counted["zero_solo"] += throughput == 0
            _add_solo(runs, jobs, campaign, gpu, job_type, throughput)
        _import_pairs(runs, jobs, campaign, gpu, path, entries, names, solo, counted)
        counts[gpu] = counted
    if not any(r["status"] == STATUS_OK for r in runs):
        raise InputError("has no usable measurement (every throughput is 0)", source=path, field=chosen[0],
                         valid="solo ('null') throughputs > 0 for at least one job")
    meta = _import_meta(campaign, path, scale_factor, chosen, [g for g in data if g not in chosen], counts)
    return GavelImport(typed_frame(runs, RUN_COLUMNS, RUN_NUMERIC), typed_frame(jobs, JOB_COLUMNS, JOB_NUMERIC), meta)


def _scale_factor_entries(
    jobs: dict[str, Any], path: Path, gpu: str, scale_factor: int
) -> tuple[dict[str, tuple[str, dict[str, Any]]], dict[str, str]]:
    """A worker type's entries at ``scale_factor``: job type → (original key, entry), and key → job type."""
    entries: dict[str, tuple[str, dict[str, Any]]] = {}
    names: dict[str, str] = {}
    for key, entry in jobs.items():
        name, factor = parse_gavel_key(key, path, gpu)
        if factor != scale_factor:
            continue
        _, _, job_type = gavel_job_type(name)
        if job_type in entries:
            raise InputError(f"job keys {entries[job_type][0]!r} and {key!r} are the same job type {job_type!r}",
                             source=path, field=f"{gpu}.{key}", valid="one key per job and scale factor")
        entries[job_type] = (key, entry)
        names[key] = job_type
    if not entries:
        raise InputError(f"no jobs with scale factor {scale_factor}", source=path, field=gpu,
                         valid="scale factors present in the file (Gavel: 1, 2, 4, 8)")
    return entries, names


def _import_pairs(runs: list[dict[str, Any]], jobs: list[dict[str, Any]], campaign: str, gpu: str, path: Path,
                  entries: dict[str, tuple[str, dict[str, Any]]], names: dict[str, str], solo: dict[str, float],
                  counted: dict[str, int]) -> None:
    """One pair run per unordered pair of a worker type (two repeats where the file's directions disagree)."""
    for job_a in sort_job_types(entries):
        key_a, entry_a = entries[job_a]
        for key_b, value in entry_a.items():
            if key_b == "null":
                continue
            if key_b not in names:  # another scale factor's job; anything else is a broken key
                if parse_gavel_key(key_b, path, gpu)[1] == parse_gavel_key(key_a, path, gpu)[1]:
                    raise InputError(f"partner {key_b!r} is not a job of worker type {gpu!r}", source=path,
                                     field=f"{gpu}.{key_a}.{key_b}", valid="partner keys that are job keys of the "
                                                                         "same worker type")
                continue
            job_b = names[key_b]
            if sort_job_types([job_a, job_b])[0] != job_a:
                continue  # each unordered pair once, from its first job's entry
            forward = _pair_value(value, path, f"{gpu}.{key_a}.{key_b}")
            measurements = [forward]
            reverse_raw = entries[job_b][1].get(key_a)
            if reverse_raw is not None and job_a != job_b:
                reverse = _pair_value(reverse_raw, path, f"{gpu}.{key_b}.{key_a}")[::-1]
                if not all(math.isclose(x, y, rel_tol=_EQUAL_REL_TOL) for x, y in zip(forward, reverse)):
                    measurements.append(reverse)
                    counted["asymmetric_pairs"] += 1
            counted["pairs"] += 1
            for repeat, (x_a, x_b) in enumerate(measurements):
                feasible = _add_pair(runs, jobs, campaign, gpu, (job_a, job_b), (x_a, x_b),
                                     (solo[job_a], solo[job_b]), repeat)
                counted["infeasible_pairs"] += (not feasible) and repeat == 0


def _import_meta(campaign: str, path: Path, scale_factor: int, chosen: list[str], skipped: list[str],
                 counts: dict[str, dict[str, int]]) -> dict[str, Any]:
    """meta.json of an imported Gavel file: where it came from and how its values were read."""
    return {
        "campaign": campaign,
        "source": {"kind": "gavel-throughputs", "file": str(path), "scale_factor": scale_factor,
                   "origin": "github.com/stanford-futuredata/gavel (MIT); measured steps/s alone and in pairs"},
        "gpu_types": chosen,
        "skipped_worker_types": skipped,
        "counts": counts,
        "notes": [
            "t = 1 / throughput (seconds per training step); ratio = co-located / solo throughput = t/t'.",
            "Gavel co-located jobs as concurrent processes on one GPU (MPS not stated): recorded as sharing "
            f"'{GAVEL_SHARING}'.",
            "A pair value [0, 0] is recorded as status 'infeasible' (cannot be co-located, e.g. out of memory).",
            "Where T[a][b] and T[b][a] disagree, both directions are kept as two repeats of the pair.",
        ],
    }


def _pair_value(value: Any, source: Path, field: str) -> tuple[float, float]:
    if not (isinstance(value, (list, tuple)) and len(value) == 2):
        raise InputError(f"pair value {value!r} is not a list of two throughputs", source=source, field=field,
                         valid="[this job's steps/s, partner's steps/s], or [0, 0] when infeasible")
    return throughput_value(value[0], source, field), throughput_value(value[1], source, field)


def _run_row(campaign: str, gpu: str, kind: str, sharing: str, job_types: list[str], repeat: int) -> dict[str, Any]:
    parsed = [split_job_type(j) for j in job_types]
    # Our cell ids assume one GPU type per directory; a Gavel file holds several, so the type leads the id.
    cell_id = f"{gpu}:{kind}|{sharing}|" + "+".join(job_types)
    return {
        "run_id": f"{cell_id}#r{repeat}", "cell_id": cell_id, "campaign": campaign, "kind": kind,
        "group_size": len(job_types), "device": "cuda", "gpu_name": GPU_NAMES.get(gpu, gpu.upper()),
        "gpu_type": gpu, "sharing": sharing, "models": "+".join(m for m, _ in parsed),
        "batch_sizes": "+".join("" if b is None else str(b) for _, b in parsed),
        "job_types": "+".join(job_types), "repeat": repeat, "error": "",
    }


def _job_row(run: dict[str, Any], index: int, job_type: str) -> dict[str, Any]:
    model, batch = split_job_type(job_type)
    return {"run_id": run["run_id"], "cell_id": run["cell_id"], "job_index": index, "model": model,
            "batch_size": batch, "job_type": job_type, "error": ""}


def _add_solo(runs: list, jobs: list, campaign: str, gpu: str, job_type: str, throughput: float) -> None:
    run = _run_row(campaign, gpu, "solo", SHARING_SOLO, [job_type], 0)
    job = _job_row(run, 0, job_type)
    if throughput > 0:
        run["status"] = job["status"] = STATUS_OK
        job["iter_time_s"] = job["solo_iter_time_s"] = 1.0 / throughput
    else:
        run["status"] = job["status"] = STATUS_INFEASIBLE
        run["error"] = job["error"] = "Gavel: isolated throughput 0 (could not run alone)"
    runs.append(run)
    jobs.append(job)


def _add_pair(
    runs: list, jobs: list, campaign: str, gpu: str, job_types: tuple[str, str], colocated: tuple[float, float],
    solo: tuple[float, float], repeat: int,
) -> bool:
    run = _run_row(campaign, gpu, "pair", GAVEL_SHARING, list(job_types), repeat)
    feasible = all(x > 0 for x in colocated) and all(s > 0 for s in solo)
    run["status"] = STATUS_OK if feasible else STATUS_INFEASIBLE
    if not feasible:
        run["error"] = "Gavel: [0, 0] (cannot be co-located)" if not all(x > 0 for x in colocated) \
            else "Gavel: a member has no solo throughput"
    t = [1.0 / s if s > 0 else math.nan for s in solo]
    t_prime = [1.0 / x if x > 0 else math.nan for x in colocated]
    if feasible:
        run["delta"] = sum(t) / max(t_prime)
        run["throughput_sum"] = sum(a / b for a, b in zip(t, t_prime))
        run["max_slowdown"] = max(b / a for a, b in zip(t, t_prime))
    runs.append(run)
    for index, job_type in enumerate(job_types):
        job = _job_row(run, index, job_type)
        job["status"], job["error"] = run["status"], run["error"]
        job["solo_iter_time_s"] = t[index]
        if feasible:
            job["iter_time_s"] = t_prime[index]
            job["slowdown"] = t_prime[index] / t[index]
            job["ratio"] = t[index] / t_prime[index]
        jobs.append(job)
    return feasible


def export_gavel(results: ResultsSet, *, sharing: str | None = None, scale_factor: int = 1) -> dict[str, Any]:
    """Our solo baselines and pairs in Gavel's ``simulation_throughputs.json`` layout (steps/s).

    Co-located throughput = ratio × solo throughput, averaged over repeats; infeasible pairs become
    ``[0.0, 0.0]``; pairs never measured are left out (Gavel's policies treat absent pairs as not packable).
    One sharing mode per file: ``sharing`` picks it when the results hold several.
    """
    pairs = group_table(results, 2)
    sharing = choose_sharing(pairs["sharing"], sharing, results.label)
    solo = solo_table(results)
    if solo.empty:
        raise InputError("no successful solo runs to export", source=results.label, field="kind",
                         valid="results with solo baselines (group_sizes including 1)")
    out: dict[str, Any] = {}

    def key(job_type: str) -> str:
        return str((gavel_job_name(job_type), scale_factor))

    for gpu_type, gpu_solo in solo.groupby("gpu_type"):
        throughput = {jt: 1.0 / t for jt, t in zip(gpu_solo["job_type"], gpu_solo["solo_iter_time_s"])}
        table: dict[str, dict[str, Any]] = {key(jt): {"null": tp} for jt, tp in throughput.items()}
        gpu_pairs = pairs[(pairs["gpu_type"] == gpu_type) & (pairs["sharing"] == sharing)] if sharing else pairs.iloc[0:0]
        for row in gpu_pairs.itertuples(index=False):
            a, b = row.type_a, row.type_b
            if a not in throughput or b not in throughput:
                continue
            if row.status == STATUS_OK:
                x_a, x_b = row.ratio_a * throughput[a], row.ratio_b * throughput[b]
            elif row.status == STATUS_INFEASIBLE:
                x_a = x_b = 0.0
            else:
                continue  # failed/skipped: not a measurement
            table[key(b)][key(a)] = [x_b, x_a]
            table[key(a)][key(b)] = [x_a, x_b]  # last: a self-pair keeps the (a, b) order
        out[str(gpu_type)] = table
    return out


def gavel_results(path: str | Path, *, scale_factor: int = 1, gpu_types: tuple[str, ...] | None = None) -> ResultsSet:
    """A Gavel file as an in-memory :class:`ResultsSet` (what ``--gavel FILE`` options read)."""
    imported = import_gavel(path, scale_factor=scale_factor, gpu_types=gpu_types)
    return results_from_frames([imported.runs], [imported.jobs], [], [imported.meta], [Path(path)])


def write_import(imported: GavelImport, out_dir: str | Path) -> list[Path]:
    """Write an import as a results directory: runs/jobs Parquet + CSV copies and meta.json (atomically)."""
    out = Path(out_dir)
    atomic_write_parquet(imported.runs, out / RUNS_FILE)
    atomic_write_parquet(imported.jobs, out / JOBS_FILE)
    atomic_write_json(imported.meta, out / META_FILE)
    return [out / RUNS_FILE, out / RUNS_FILE.replace(".parquet", ".csv"), out / JOBS_FILE,
            out / JOBS_FILE.replace(".parquet", ".csv"), out / META_FILE]


def load_inputs(
    results_dirs: Sequence[str | Path] = (), gavel_files: Sequence[str | Path] = (), *,
    gpu_types: Sequence[str] | None = None, scale_factor: int = 1,
) -> ResultsSet:
    """What the analysis commands read: results directories and/or Gavel files, optionally one or more GPU types."""
    if not results_dirs and not gavel_files:
        raise InputError("no input given", field="RESULTS_DIR",
                         valid="one or more results directories and/or --gavel FILE.json")
    seen: dict[Path, str | Path] = {}
    for path in [*results_dirs, *gavel_files]:  # one input twice would count every one of its runs twice
        if Path(path).resolve() in seen:
            raise InputError(f"given twice (also as {seen[Path(path).resolve()]})", source=path,
                             field="--gavel" if path in gavel_files else "RESULTS_DIR", valid="each input once")
        seen[Path(path).resolve()] = path
    parts: list[ResultsSet] = []
    if results_dirs:
        parts.append(load_results(list(results_dirs)))
    for path in gavel_files:
        data_types = None
        if gpu_types:  # only the requested worker types that the file has; unknown ones are checked below
            available = read_gavel_json(path).keys()
            data_types = tuple(g for g in gpu_types if g in available) or None
        parts.append(gavel_results(path, scale_factor=scale_factor, gpu_types=data_types))
    results = combine_results(parts)
    if gpu_types:
        unknown = [g for g in gpu_types if g not in results.gpu_types]
        if unknown:
            raise InputError(f"GPU type '{unknown[0]}' not in the inputs", source=results.label, field="--gpu-type",
                             valid=", ".join(results.gpu_types))
        keep = set(gpu_types)
        results = ResultsSet(
            results.runs[results.runs["gpu_type"].isin(keep)].reset_index(drop=True),
            results.jobs[results.jobs["gpu_type"].isin(keep)].reset_index(drop=True),
            results.kernels[results.kernels["gpu_type"].isin(keep)].reset_index(drop=True)
            if not results.kernels.empty else results.kernels,
            results.meta, results.sources,
        )
    return results
