"""Workloads for the simulator: readers for public traces and a synthetic Poisson generator.

A :class:`Workload` is a list of :class:`WorkloadJob` (arrival, application, requested GPUs and batch size,
and optionally how much work the job is). Readers, chosen by :func:`read_workload` from the file's shape:

* **Sia / Pollux workload CSV** — ``name,time,application,num_replicas,batch_size`` (Sia's
  ``workloads/{philly,saturn,newtrace}/workload-*.csv``, Pollux's ``workloads*/workload-*.csv``). Optional
  extra columns ``work`` (useful samples to finish) and ``duration`` (seconds alone at the requested size
  on the reference GPU type) override the default job length, which is Sia's: the application's full GNS
  reference curve (e.g. 100 epochs for cifar10).
* **Gavel trace** — tab-separated ``.trace`` files (7 fields for ``traces/msr``, 10 for
  ``traces/physical_cluster``). Gavel's job types are mapped to Sia applications with
  :data:`scheduler.formats.transfer.GAVEL_TO_SIA`; a job's length becomes its duration alone on a V100
  (``total_steps`` / Gavel's measured isolated steps/s), which the simulator turns into work.
* **Philly job CSV** — ``timestamp,duration,num_gpus,gpu_time,cluster`` (Sia's ``traces/philly.csv``):
  :func:`read_philly` samples a window the way Sia built its workloads (jobs ≥ 60 s and < 1,000 GPU-hours;
  application by GPU-time class: < 1 h cifar10, < 10 h deepspeech2 or bert, < 100 h yolov3, else imagenet).

:func:`poisson_workload` draws arrivals from a Poisson process with Philly's job-size mix
(:data:`PHILLY_CLASS_MIX`, :data:`PHILLY_GPU_MIX`, measured on Sia's ``traces/philly.csv``).

Every malformed row raises a one-line :class:`~common.errors.InputError` naming file, row and field.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from common.bounds import MAX_BATCH, MAX_GPUS, check_number
from common.errors import InputError
from common.names import check_name, shown
from scheduler.formats.shared_data import gavel_throughputs_path
from scheduler.formats.workload_jobs import OPTIONAL_COLUMNS, SIA_COLUMNS, Workload, WorkloadJob
from scheduler.model.jobs import REQUIREMENT_RULES, JobRequirements

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")

# Initial (M0) and largest validated global batch per Sia application: the batch sizes of Sia's
# validation-<bsz>.csv curves (siasosp23/artifacts, sia-simulator/traces/<app>/). Used by the generator
# to pick a rigid job's batch; the simulator reads the curves themselves at run time.
SIA_BATCH_LIMITS: Mapping[str, tuple[int, int]] = {
    "bert": (12, 384), "cifar10": (128, 4096), "deepspeech2": (20, 640),
    "imagenet": (200, 12800), "ncf": (256, 32768), "yolov3": (8, 512),
}

# Philly (Sia's traces/philly.csv, 74,428 jobs after Sia's filters: duration >= 60 s, < 1,000 GPU-hours).
# Share of jobs per GPU-time class and, per class, the share of each requested GPU count (<= 16, as Sia caps
# job size at 16 GPUs; larger requests are folded into 16).
PHILLY_CLASS_MIX: Mapping[str, float] = {"small": 0.7458, "medium": 0.1855, "large": 0.0480, "xlarge": 0.0207}
PHILLY_GPU_MIX: Mapping[str, Mapping[int, float]] = {
    "small": {1: 0.9854, 2: 0.0027, 4: 0.0078, 8: 0.0039, 16: 0.0003},
    "medium": {1: 0.9542, 2: 0.0021, 4: 0.0204, 8: 0.0197, 12: 0.0004, 16: 0.0032},
    "large": {1: 0.6456, 2: 0.0517, 4: 0.1771, 8: 0.1124, 12: 0.0003, 16: 0.0129},
    "xlarge": {1: 0.1749, 2: 0.0644, 4: 0.2867, 8: 0.4018, 16: 0.0723},
}
# Sia's GPU-time classes -> application (medium jobs are split evenly between deepspeech2 and bert).
PHILLY_CLASS_APPS: Mapping[str, tuple[str, ...]] = {
    "small": ("cifar10",), "medium": ("deepspeech2", "bert"), "large": ("yolov3",), "xlarge": ("imagenet",),
}
MAX_JOB_GPUS = 16
# Arrivals and durations beyond the simulator's horizon (SimConfig.max_time_s, 60 days) would run for
# minutes and finish nothing: they are refused when read.
MAX_WORKLOAD_SECONDS = 60 * 86400.0
MAX_GAVEL_SCALE_FACTOR = 64


def _sorted(jobs: Iterable[WorkloadJob]) -> tuple[WorkloadJob, ...]:
    return tuple(sorted(jobs, key=lambda j: (j.arrival, j.name)))


# --------------------------------------------------------------------------------------------------
# Sia / Pollux workload CSV
# --------------------------------------------------------------------------------------------------

def _number(text: str | None, *, source: str, row: int, field_name: str, valid: str, integer: bool = False,
            minimum: float = 0.0, strict: bool = False, maximum: float = MAX_WORKLOAD_SECONDS) -> float:
    return check_number(_parsed(text, source=source, row=row, field_name=field_name, valid=valid), field=field_name,
                        low=minimum, high=maximum, low_open=strict, integer=integer, source=source, row=row,
                        valid=valid)


def _parsed(text: str | None, *, source: str, row: int, field_name: str, valid: str) -> float:
    raw = "" if text is None else str(text).strip()
    try:
        return float(raw)
    except ValueError:
        raise InputError(f"row {row}: cannot read {shown(raw)}", source=source, field=field_name,
                         valid=valid) from None


def read_sia_workload(path: str | Path) -> Workload:
    """Read a Sia/Pollux workload CSV (``name,time,application,num_replicas,batch_size[,work][,duration]`` and,
    per job, ``[,max_slowdown][,exclusive]``: its slowdown bound in a group, or never sharing its GPUs)."""
    p = Path(path)
    source = str(p)
    if not p.is_file():
        raise InputError("workload file not found", source=p, field="workload", valid="a workload CSV path")
    import io

    from common.safe_load import read_text

    with io.StringIO(read_text(p, field="workload", what="workload file"), newline="") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in SIA_COLUMNS if c not in header]
        if missing:
            raise InputError(f"header lacks {', '.join(missing)}", source=source, field=missing[0],
                             valid="header " + ",".join(SIA_COLUMNS) + "[,work][,duration][,max_slowdown][,exclusive]")
        unknown = [h for h in header if h not in SIA_COLUMNS and h not in OPTIONAL_COLUMNS]
        if unknown:
            raise InputError(f"unknown column {shown(unknown[0])}", source=source, field=unknown[0][:40],
                             valid=",".join(SIA_COLUMNS + OPTIONAL_COLUMNS))
        jobs: list[WorkloadJob] = []
        seen: set[str] = set()
        for i, raw in enumerate(reader):
            row = i + 2
            if None in raw:
                raise InputError(f"row {row}: more values than header columns", source=source, field="name",
                                 valid="one value per header column")
            rec = {k.strip(): (v.strip() if isinstance(v, str) else v) for k, v in raw.items()}
            name = rec.get("name") or ""
            if not name:
                raise InputError(f"row {row}: empty name", source=source, field="name", valid="a unique job name")
            check_name(name, source=source, field="name", what=f"job name (row {row})")
            if name in seen:
                raise InputError(f"row {row}: duplicate job name {name!r}", source=source, field="name",
                                 valid="unique names")
            seen.add(name)
            app = rec.get("application") or ""
            if not app:
                raise InputError(f"row {row}: empty application", source=source, field="application",
                                 valid="an application with profiles, e.g. cifar10")
            check_name(app, source=source, field="application", what=f"application (row {row})")
            if rec.get("time") is None:
                raise InputError(f"row {row}: missing time", source=source, field="time", valid="seconds >= 0")
            arrival = _number(rec.get("time"), source=source, row=row, field_name="time",
                              valid=f"seconds in [0, {MAX_WORKLOAD_SECONDS:g}] (the simulator's horizon)")
            gpus = _number(rec.get("num_replicas"), source=source, row=row, field_name="num_replicas",
                           valid=f"an integer in [1, {MAX_GPUS}]", integer=True, minimum=1, maximum=MAX_GPUS)
            batch_text = rec.get("batch_size") or ""
            batch = None
            if batch_text:
                batch = int(_number(batch_text, source=source, row=row, field_name="batch_size",
                                    valid=f"an integer in [1, {MAX_BATCH}] (global batch)", integer=True, minimum=1,
                                    maximum=MAX_BATCH))
            work = duration = None
            if rec.get("work"):
                work = _number(rec["work"], source=source, row=row, field_name="work",
                               valid="useful samples to finish, a number in (0, 1e15]", strict=True, maximum=1e15)
            if rec.get("duration"):
                duration = _number(rec["duration"], source=source, row=row, field_name="duration",
                                   valid=f"seconds alone on the reference GPU type, in (0, {MAX_WORKLOAD_SECONDS:g}]",
                                   strict=True)
            bound = None
            if rec.get("max_slowdown"):
                bound = _parsed(rec["max_slowdown"], source=source, row=row, field_name="max_slowdown",
                                valid=REQUIREMENT_RULES["max_slowdown"])
            exclusive = str(rec.get("exclusive") or "").lower()
            needs = JobRequirements.checked(None, bound, {"": False, "false": False, "0": False, "true": True,
                                                          "1": True}.get(exclusive, exclusive), source=source, row=row)
            jobs.append(WorkloadJob(name, app, arrival, int(gpus), batch, work, duration, needs))
    if not jobs:
        raise InputError("no jobs", source=source, field="name", valid="at least one job row")
    return Workload(p.stem, _sorted(jobs), source)


# --------------------------------------------------------------------------------------------------
# Gavel traces
# --------------------------------------------------------------------------------------------------

def _find_gavel_throughputs(trace: Path) -> Path | None:
    for parent in trace.resolve().parents:
        candidate = parent / "simulation_throughputs.json"
        if candidate.is_file():
            return candidate
    fallback = gavel_throughputs_path()
    return fallback if fallback.is_file() else None


def read_gavel_trace(path: str | Path, throughputs: str | Path | None = None,
                     max_jobs: int | None = None) -> Workload:
    """Read a Gavel ``.trace`` file; job length = ``total_steps`` / Gavel's isolated V100 steps/s.

    ``throughputs`` is Gavel's ``simulation_throughputs.json`` (default: found above the trace's folder).
    Job types without a Sia counterpart (A3C, CycleGAN) are mapped as :data:`scheduler.formats.transfer.GAVEL_TO_SIA`
    says; an unknown type is an error naming the row.
    """
    from scheduler.formats.gavel_format import gavel_job_type
    from scheduler.formats.transfer import GAVEL_TO_SIA, read_gavel_isolated

    p = Path(path)
    source = str(p)
    if not p.is_file():
        raise InputError("Gavel trace not found", source=p, field="workload", valid="a .trace file")
    tput_path = Path(throughputs) if throughputs else _find_gavel_throughputs(p)
    if tput_path is None or not tput_path.is_file():
        raise InputError("Gavel's simulation_throughputs.json not found next to the trace", source=p,
                         field="throughputs", valid="pass the path of simulation_throughputs.json")
    isolated = read_gavel_isolated(tput_path)
    jobs: list[WorkloadJob] = []
    import io

    from common.safe_load import read_text

    with io.StringIO(read_text(p, field="workload", what="Gavel trace")) as fh:
        for i, line in enumerate(fh):
            row = i + 1
            if not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 7:
                job_type, total, arrival, scale = fields[0], fields[4], fields[5], fields[6]
            elif len(fields) == 10:
                job_type, total, scale, arrival = fields[0], fields[5], fields[6], fields[9]
            else:
                raise InputError(f"row {row}: {len(fields)} tab-separated fields", source=source, field="row",
                                 valid="7 fields (traces/msr) or 10 fields (traces/physical_cluster)")
            model = gavel_job_type(job_type)[0]
            if model not in GAVEL_TO_SIA:
                raise InputError(f"row {row}: job type {job_type!r} has no Sia counterpart", source=source,
                                 field="job_type", valid=", ".join(sorted(GAVEL_TO_SIA)))
            steps = _number(total, source=source, row=row, field_name="total_steps",
                            valid="a number of steps in (0, 1e12]", strict=True, maximum=1e12)
            t = _number(arrival, source=source, row=row, field_name="arrival_time",
                        valid=f"seconds in [0, {MAX_WORKLOAD_SECONDS:g}] (the simulator's horizon)")
            sf = int(_number(scale, source=source, row=row, field_name="scale_factor",
                             valid=f"an integer in [1, {MAX_GAVEL_SCALE_FACTOR}]", integer=True, minimum=1,
                             maximum=MAX_GAVEL_SCALE_FACTOR))
            rate = isolated.get(("v100", job_type.strip(), sf)) or isolated.get(("v100", job_type.strip(), 1))
            if not rate:
                raise InputError(f"row {row}: no isolated V100 throughput for {job_type!r} x{sf}",
                                 source=source, field="job_type", valid="a job type of simulation_throughputs.json")
            app = GAVEL_TO_SIA[model]
            if steps / rate > MAX_WORKLOAD_SECONDS:
                raise InputError(f"row {row}: {steps:g} steps take {steps / rate:.3g} s alone on a V100", source=source,
                                 field="total_steps", valid=f"jobs of at most {MAX_WORKLOAD_SECONDS:g} s")
            jobs.append(WorkloadJob(f"{app}-{len(jobs)}", app, t, sf, None, None, steps / rate))
            if max_jobs is not None and len(jobs) >= max_jobs:
                break
    if not jobs:
        raise InputError("no jobs", source=source, field="row", valid="at least one trace line")
    return Workload(p.stem, _sorted(jobs), source)


# --------------------------------------------------------------------------------------------------
# Philly job CSV and the Poisson generator
# --------------------------------------------------------------------------------------------------

def _philly_class(gpu_time_s: float) -> str:
    hours = gpu_time_s / 3600.0
    if hours < 1:
        return "small"
    if hours < 10:
        return "medium"
    if hours < 100:
        return "large"
    return "xlarge"


def rigid_batch(application: str, num_gpus: int) -> int | None:
    """A rigid request's global batch: the application's M0 per GPU, within its validated range."""
    limits = SIA_BATCH_LIMITS.get(application)
    if limits is None:
        return None
    lo, hi = limits
    return int(min(hi, max(lo, lo * num_gpus)))


def read_philly(path: str | Path, *, start_hour: float | None = None, hours: float = 8.0,
                num_jobs: int | None = 160, seed: int = 0) -> Workload:
    """Sample a workload from the Philly job CSV the way Sia did (window, filters, GPU-time classes).

    The window starts ``start_hour`` hours after the first job, or (None) is the busiest ``hours``-long
    window of whole hours (Sia's Philly workloads are "the 8 busiest hours"). Arrivals are the jobs'
    submission times relative to the window start; ``num_gpus`` is the Philly request (capped at 16); the
    length is the application's (Sia's convention), not the Philly duration.
    """
    import numpy as np
    import pandas as pd

    p = Path(path)
    source = str(p)
    if not p.is_file():
        raise InputError("Philly job CSV not found", source=p, field="workload", valid="a CSV file path")
    try:
        frame = pd.read_csv(p, encoding="utf-8-sig")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise InputError(f"not a readable UTF-8 CSV ({type(err).__name__})", source=source, field="timestamp",
                         valid="header " + ",".join(PHILLY_COLUMNS)) from None
    missing = [c for c in PHILLY_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"header lacks {', '.join(missing)}", source=source, field=missing[0],
                         valid="header " + ",".join(PHILLY_COLUMNS))
    stamps = pd.to_datetime(frame["timestamp"], errors="coerce")
    if stamps.isna().any():
        i = int(stamps.isna().to_numpy().nonzero()[0][0])
        raise InputError(f"row {i + 2}: timestamp '{str(frame['timestamp'].iloc[i])[:60]}'", source=source,
                         field="timestamp", valid="a date-time such as 2017-10-09 07:01:55")
    for col in ("duration", "num_gpus", "gpu_time"):
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = values.isna() | (values < 0)
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise InputError(f"row {i + 2}: {col} '{str(frame[col].iloc[i])[:60]}'", source=source, field=col,
                             valid="a number >= 0")
        frame[col] = values
    frame["timestamp"] = stamps
    frame = frame[(frame["duration"] >= 60) & (frame["gpu_time"] < 1000 * 3600) & (frame["num_gpus"] >= 1)]
    if frame.empty:
        raise InputError("no jobs (after Sia's filters: duration >= 60 s, < 1,000 GPU-hours, >= 1 GPU)",
                         source=source, field="duration", valid="at least one job row that passes them")
    check_number(hours, field="hours", low=0, high=24 * 365, low_open=True, valid="hours in (0, 8760]")
    if start_hour is None:
        hour = ((frame["timestamp"] - frame["timestamp"].min()).dt.total_seconds() // 3600).astype(int)
        per_hour = hour.value_counts().reindex(range(int(hour.max()) + 1), fill_value=0)
        window_sum = per_hour.rolling(max(int(math.ceil(hours)), 1), min_periods=1).sum()
        start_hour = float(max(int(window_sum.idxmax()) - max(int(math.ceil(hours)), 1) + 1, 0))
    t0 = frame["timestamp"].min() + pd.Timedelta(hours=start_hour)
    window = frame[(frame["timestamp"] >= t0) & (frame["timestamp"] < t0 + pd.Timedelta(hours=hours))]
    if window.empty:
        raise InputError(f"no jobs between hour {start_hour} and {start_hour + hours}", source=source,
                         field="timestamp", valid="a window inside the trace")
    rng = np.random.default_rng(seed)
    if num_jobs is not None and num_jobs < len(window):
        window = window.iloc[np.sort(rng.choice(len(window), size=num_jobs, replace=False))]
    jobs: list[WorkloadJob] = []
    for row in window.sort_values("timestamp").itertuples():
        apps = PHILLY_CLASS_APPS[_philly_class(float(row.gpu_time))]
        app = apps[int(rng.integers(len(apps)))]
        gpus = int(min(MAX_JOB_GPUS, row.num_gpus))
        arrival = (row.timestamp - t0).total_seconds()
        jobs.append(WorkloadJob(f"{app}-{len(jobs)}", app, float(arrival), gpus, rigid_batch(app, gpus)))
    return Workload(f"philly-{start_hour:g}h-{hours:g}h-s{seed}", _sorted(jobs), source)


def poisson_workload(num_jobs: int, *, jobs_per_hour: float = 20.0, seed: int = 0,
                     applications: Sequence[str] | None = None, name: str | None = None) -> Workload:
    """Poisson arrivals (``jobs_per_hour``) with Philly's job-size mix and Sia's application classes.

    Each job draws a GPU-time class from :data:`PHILLY_CLASS_MIX`, its application from that class
    (:data:`PHILLY_CLASS_APPS`) and its GPU count from the class's Philly distribution
    (:data:`PHILLY_GPU_MIX`). ``applications`` restricts the classes to those whose applications are listed
    (the mix is renormalised), e.g. to keep a demo short without imagenet.
    """
    import numpy as np

    check_number(num_jobs, field="num_jobs", low=1, high=math.inf, integer=True, source="poisson_workload",
                 valid="an integer >= 1")
    check_number(jobs_per_hour, field="jobs_per_hour", low=0, high=math.inf, low_open=True,
                 source="poisson_workload", valid="a number > 0")
    classes = {c: w for c, w in PHILLY_CLASS_MIX.items()
               if applications is None or any(a in applications for a in PHILLY_CLASS_APPS[c])}
    if not classes:
        raise InputError(f"none of {list(applications or [])} is generated", source="poisson_workload",
                         field="applications", valid=", ".join(sorted({a for v in PHILLY_CLASS_APPS.values() for a in v})))
    rng = np.random.default_rng(seed)
    names = list(classes)
    weights = np.array([classes[c] for c in names], dtype=float)
    weights /= weights.sum()
    gaps = rng.exponential(3600.0 / jobs_per_hour, size=num_jobs)
    arrivals = np.cumsum(gaps) - gaps[0]  # the first job arrives at time 0
    jobs = []
    for k in range(num_jobs):
        cls = names[int(rng.choice(len(names), p=weights))]
        apps = [a for a in PHILLY_CLASS_APPS[cls] if applications is None or a in applications]
        app = apps[int(rng.integers(len(apps)))]
        sizes = PHILLY_GPU_MIX[cls]
        counts = np.array(list(sizes.keys()))
        probs = np.array(list(sizes.values()), dtype=float)
        gpus = int(counts[int(rng.choice(len(counts), p=probs / probs.sum()))])
        jobs.append(WorkloadJob(f"{app}-{k}", app, float(round(arrivals[k], 1)), gpus, rigid_batch(app, gpus)))
    return Workload(name or f"poisson-{num_jobs}-{jobs_per_hour:g}ph-s{seed}", _sorted(jobs), "<poisson>")


# --------------------------------------------------------------------------------------------------
# Dispatch
# --------------------------------------------------------------------------------------------------

def read_workload(path: str | Path, **options: object) -> Workload:
    """Read any supported workload file, chosen by extension and header (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise InputError("workload file not found", source=p, field="workload",
                         valid="a Sia/Pollux workload CSV, a Gavel .trace or the Philly job CSV")
    if p.suffix == ".trace":
        return read_gavel_trace(p, **options)  # type: ignore[arg-type]
    with p.open(newline="", encoding="utf-8-sig", errors="replace") as fh:
        first = fh.readline(65536)
    header = [h.strip() for h in first.strip().split(",")]
    if all(c in header for c in PHILLY_COLUMNS):
        return read_philly(p, **options)  # type: ignore[arg-type]
    if "\t" in first:
        return read_gavel_trace(p, **options)  # type: ignore[arg-type]
    return read_sia_workload(p)


def load_workload(workload: "Workload | str | Path") -> Workload:
    """A :class:`Workload` as it is, or read from a path."""
    return workload if isinstance(workload, Workload) else read_workload(workload)


__all__ = ["read_workload", "load_workload", "read_sia_workload", "read_gavel_trace", "read_philly",
    "poisson_workload", "rigid_batch", "SIA_BATCH_LIMITS", "PHILLY_CLASS_MIX", "PHILLY_GPU_MIX",
    "PHILLY_CLASS_APPS"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m scheduler.formats.workloads OUT.csv [NUM_JOBS] [JOBS_PER_HOUR] [SEED] [APP,APP,...]``: a Poisson workload."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(main.__doc__)
        return 2
    num = int(args[1]) if len(args) > 1 else 24
    rate = float(args[2]) if len(args) > 2 else 40.0
    seed = int(args[3]) if len(args) > 3 else 0
    apps = args[4].split(",") if len(args) > 4 else None
    workload = poisson_workload(num, jobs_per_hour=rate, seed=seed, applications=apps,
                                name=Path(args[0]).stem)
    workload.write_csv(args[0])
    print(f"wrote {len(workload)} jobs to {args[0]}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
