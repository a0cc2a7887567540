"""Run a whole campaign into a results directory, resuming where an earlier invocation stopped.

A batch size's solo runs come first and provide each job type's baseline t (mean over its ok solo repeats
of the same *session*) and memory; every group run then computes δ against those baselines. A session is
one invocation on one machine (each row records ``session_id``, ``host``, ``gpu_uuid`` and ``driver``):
two GPUs of one model differ in clocks and cooling, so a pair is never compared with solos measured on
another machine. A campaign resumed in the middle of a batch-size block therefore measures that block's
solos again before its groups. Completed runs are never re-run; runs recorded as skipped (no GPU or MPS on
the machine that ran them, or MPS broken there) are tried again. One :class:`~profiler.campaign.pool.WorkerPool`
serves the session, so warm workers carry over between runs.

A GPU in an exclusive compute mode is refused: idle warm workers hold contexts, and a group's second process
could never get one.
"""

from __future__ import annotations

import getpass
import math
import platform
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from common.errors import InputError
from common.signals import sigterm_as_interrupt
from profiler.campaign.cells import JobType, Run, plan_runs, runs_for_gpu_type
from profiler.campaign.pool import WorkerPool, upcoming_block
from profiler.campaign.runner import RunRecord, SoloBaseline, execute_run
from profiler.campaign.spec import CampaignSpec
from profiler.gpu.devices import DeviceTarget, resolve_device
from profiler.gpu.mps import foreign_mps_processes, mps_unavailable_reason, reap_stale_daemons
from profiler.gpu.nvml import compute_mode, compute_mode_problem, gpm_supported, nvml_status
from profiler.gpu.sharing import SHARING_SOLO
from profiler.measure.training import CUDNN_BENCHMARK
from profiler.results.schema import STATUS_INFEASIBLE, STATUS_OK
from profiler.results.store import ResultsStore

# Spec fields that change what a number means: a results directory holds one protocol only (and one GPU
# name, see check_resumable). A key missing from an older meta.json counts as its default.
PROTOCOL_FIELDS = ("device", "image_size", "num_classes", "warmup_iters", "min_window_iters",
                   "min_window_seconds", "threads_per_job", "seq_len", "workers")
_SPEC_DEFAULTS = {f.name: f.default for f in fields(CampaignSpec)}


@dataclass(frozen=True)
class Progress:
    """Reported after every run: how far the campaign is and what the last run gave."""

    done: int
    total: int
    record: RunRecord | None
    resumed: int  # runs found already done at start


def open_session(store: ResultsStore, meta_update: dict[str, Any], **fields: Any) -> tuple[dict[str, Any],
                                                                                         dict[str, Any]]:
    """Update meta.json with ``meta_update`` and append a session (start time, argv, ``fields``) to it.

    Returns ``(meta, session)``: the caller fills the session in (see :class:`SessionTally`) and writes
    ``meta`` again when the session ends.
    """
    meta = store.read_meta()
    meta.update(meta_update)
    session: dict[str, Any] = {"started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                               "argv": sys.argv, **fields}
    meta["sessions"] = [*meta.get("sessions", []), session]
    store.write_meta(meta)
    return meta, session


class SessionTally:
    """Counts one session's runs and measured window time, and closes its meta.json entry.

    Shared by the local and Ray campaign loops so that both report progress and efficiency alike.
    """

    def __init__(self, planned: int, resumed: int, on_progress: Callable[[Progress], None] | None) -> None:
        self.planned, self.resumed, self.done = planned, resumed, resumed
        self.window_total = 0.0
        self.wall_start = time.perf_counter()
        self.on_progress = on_progress
        if on_progress:
            on_progress(Progress(self.done, planned, None, resumed))

    def count(self, record: RunRecord) -> None:
        """One more run committed to the store."""
        window = record.run.get("window_s")
        if window is not None and not math.isnan(window):
            self.window_total += float(window)
        self.done += 1
        if self.on_progress:
            self.on_progress(Progress(self.done, self.planned, record, self.resumed))

    def close(self, session: dict[str, Any]) -> None:
        """Record the session's figures (efficiency = measured window time / wall time) in ``session``."""
        wall = time.perf_counter() - self.wall_start
        session.update(finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       runs_executed=self.done - self.resumed, wall_s=round(wall, 3),
                       measured_window_s=round(self.window_total, 3),
                       efficiency=round(self.window_total / wall, 4) if wall > 0 else None,
                       complete=self.done == self.planned)


def baselines_from(store: ResultsStore, gpu_type: str | None = None, *, typed_cells: bool = True,
                   session_id: str | None = None) -> dict[JobType, SoloBaseline]:
    """Solo baselines from the store's committed rows of GPU type ``gpu_type`` (all rows when None).

    ``typed_cells``: the spec lists gpu_types, so a type's baselines come from its own typed cells
    ("h100:solo|…"); otherwise from the rows whose ``gpu_type`` column says that type. ``session_id``:
    times and memory only from that session's solos; a job type with none there keeps an earlier session's
    *infeasible* verdict (it did not fit this GPU model alone) and nothing else.
    """
    runs = store.runs()
    jobs = store.jobs(runs)
    result: dict[JobType, SoloBaseline] = {}
    if runs.empty:
        return result
    solo_runs = runs[runs["sharing"] == SHARING_SOLO]
    if gpu_type is not None and typed_cells:
        solo_runs = solo_runs[solo_runs["cell_id"].astype(str).str.startswith(f"{gpu_type}:")]
    elif gpu_type is not None:
        solo_runs = solo_runs[solo_runs["gpu_type"].astype(str) == gpu_type]
    if session_id is not None:
        same = solo_runs["session_id"].astype(str) == session_id if "session_id" in solo_runs else False
        solo_runs = solo_runs[same | (solo_runs["status"] == STATUS_INFEASIBLE)]
    solo_jobs = jobs[jobs["run_id"].isin(solo_runs["run_id"])]
    for job_type, rows in solo_jobs.groupby("job_type"):
        ok = rows[rows["status"] == STATUS_OK]
        times = [float(t) for t in ok["iter_time_s"] if not pd.isna(t)]
        peaks = [float(p) for p in rows["peak_memory_mib"] if not pd.isna(p)]
        nvml = [float(m) for m in rows.get("nvml_process_memory_mib", pd.Series(dtype=float)) if not pd.isna(m)]
        if times:
            result[JobType.parse(str(job_type))] = SoloBaseline(
                sum(times) / len(times), max(peaks) if peaks else None, STATUS_OK,
                process_memory_mib=max(nvml) if nvml else None)
        else:
            last = rows.iloc[-1]
            result[JobType.parse(str(job_type))] = SoloBaseline(None, None, str(last["status"]),
                                                                 str(last["error"]))
    return result


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def build_meta(spec: CampaignSpec, target: DeviceTarget) -> dict[str, Any]:
    """meta.json: resolved spec, software versions, host and what the device supports (and why not)."""
    import torch

    nvml_ok, nvml_why = nvml_status() if target.nvml_index is not None else (
        False, f"off: the campaign device is '{spec.device}', not a GPU")
    gpm_ok, gpm_why = gpm_supported(target.nvml_index) if target.nvml_index is not None else (False, nvml_why)
    mps_reason = mps_unavailable_reason(spec.device)
    return {
        "spec": spec.to_dict(),
        "device": {"spec": spec.device, "name": target.name, "gpu_type": target.gpu_type,
                   "physical_gpu": target.physical_gpu, "uuid": target.uuid,
                   "memory_total_mib": target.memory_total_mib,
                   "compute_mode": compute_mode(target.nvml_index) if target.nvml_index is not None else None},
        # MPS daemons/servers on this host that are not ours: our non-MPS workers are isolated from them
        # (private empty pipe directory), but they share the GPU's memory and time.
        "foreign_mps": foreign_mps_processes() if target.nvml_index is not None else [],
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                     "colocate": _version("colocate"), "nvidia-ml-py": _version("nvidia-ml-py"),
                     "driver": target.driver, "cudnn_benchmark": CUDNN_BENCHMARK},
        "nvml": {"enabled": nvml_ok, "why": nvml_why},
        "gpm": {"enabled": gpm_ok, "why": gpm_why},
        "mps": {"available": mps_reason is None, "why": mps_reason or "nvidia-cuda-mps-control found"},
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(), "user": getpass.getuser()},
        "occupancy_note": "kernel occupancy from the PyTorch profiler is the CUDA occupancy-calculator "
                          "estimate, identical alone or co-located",
    }


def check_resumable(store: ResultsStore, spec: CampaignSpec, out: Path, gpu_name: str | None = None) -> None:
    """Refuse to mix two measurement protocols — or two GPU models (``gpu_name``) — in one directory."""
    meta = store.read_meta()
    previous = meta.get("spec")
    if not previous:
        return
    current = spec.to_dict()
    for key in PROTOCOL_FIELDS:
        before = previous.get(key, _SPEC_DEFAULTS.get(key))
        if isinstance(before, list):
            before = list(before)
        if before != current.get(key):
            raise InputError(
                f"holds a campaign measured with {key}={before!r}, the spec says {current.get(key)!r}",
                source=out, field=key, valid="the same value, or a new --out directory")
    measured_on = (meta.get("device") or {}).get("name")
    if gpu_name is not None and measured_on and measured_on != gpu_name and not spec.gpu_types:
        raise InputError(f"holds a campaign measured on '{measured_on}', this machine's device is '{gpu_name}'",
                         source=out, field="device", valid="the same GPU model, or a new --out directory")


def new_session_id() -> str:
    """A short id for one campaign invocation: UTC start time plus randomness (sortable, unique)."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


def refuse_exclusive_mode(target: DeviceTarget) -> None:
    """Raise :class:`InputError` when the GPU's compute mode lets only one process hold a context."""
    mode = compute_mode(target.nvml_index) if target.nvml_index is not None else None
    problem = compute_mode_problem(mode)
    if problem:
        raise InputError(problem, field="device", valid="a GPU in DEFAULT compute mode (nvidia-smi -c DEFAULT, "
                                                         "by its administrator)")


def runs_to_measure(planned: list[Run], finished: set[str], baselines: dict[JobType, SoloBaseline]) -> list[Run]:
    """The planned runs not yet finished, plus the solos of any job type that a remaining group needs and
    whose baseline this session lacks (measured in an earlier session: another machine, maybe), in plan
    order, so that a block resumed midway measures its solos again before its groups."""
    todo_ids = {run.run_id for run in planned if run.run_id not in finished}
    needed = {job for run in planned if run.run_id in todo_ids and len(run.cell.jobs) > 1 for job in run.cell.jobs
              if job not in baselines or baselines[job].status != STATUS_INFEASIBLE}
    again = {run.run_id for run in planned if run.cell.sharing == SHARING_SOLO and run.cell.jobs[0] in needed
             and run.run_id not in todo_ids}
    return [run for run in planned if run.run_id in todo_ids or run.run_id in again]


def _profile_kernels_once(spec: CampaignSpec, store: ResultsStore, job: JobType, todo: list[Run]) -> str | None:
    """After a job type's last solo run, record its kernel profile (``kernels: true``) — once per job type.

    The profile runs in a worker process: the coordinator must never hold a CUDA context. Returns why it
    failed (kept in meta.json; a failed profile never stops the campaign), or None.
    """
    finished = store.finished_run_ids()
    remaining = [r for r in todo if r.cell.sharing == SHARING_SOLO and r.cell.jobs[0] == job
                 and r.run_id not in finished]
    if remaining or job.label in store.kernel_job_types():
        return None
    from concurrent.futures import ProcessPoolExecutor

    from profiler.campaign.pool import worker_context

    target = resolve_device(spec.device)
    with ProcessPoolExecutor(max_workers=1, mp_context=worker_context()) as pool:
        future = pool.submit(_kernels_in_worker, job.model, job.batch_size, spec, target.worker_device,
                             target.worker_env())
        try:
            frame = future.result(timeout=spec.run_timeout_s)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
    store.append_kernels(frame)
    return None


def _kernels_in_worker(model: str, batch_size: int, spec: CampaignSpec, device: str,
                       env: dict[str, str]) -> pd.DataFrame:
    import os

    os.environ.update(env)
    from profiler.kernels import profile_kernels

    return profile_kernels(model, batch_size, spec.image_size, device, warmup_iters=spec.warmup_iters,
                           num_classes=spec.num_classes, seed=spec.seed, threads=spec.threads_per_job)


def run_campaign(
    spec: CampaignSpec,
    out: str | Path,
    *,
    on_progress: Callable[[Progress], None] | None = None,
    runs: list[Run] | None = None,
    on_run_start: Callable[[Run, list[int]], None] | None = None,
) -> ResultsStore:
    """Measure every planned run not yet in ``out``; returns the store. Safe to call again to resume.

    ``on_run_start(run, pids)`` is called with the worker PIDs of each run as it starts (for tools that
    attach to the workers, e.g. a profiler or a fault injector).
    """
    out = Path(out)
    store = ResultsStore(out)
    target = resolve_device(spec.device)
    check_resumable(store, spec, out, target.name)
    typed = None  # with gpu_types, this device measures (and takes baselines from) its own type only
    if spec.gpu_types:
        typed = target.gpu_type
        if typed not in spec.gpu_types:
            raise InputError(f"this machine's device is of type '{typed}'", field="gpu_types",
                             valid="a list including it, or --backend ray to route runs to other types")
    refuse_exclusive_mode(target)
    stale = reap_stale_daemons() if target.nvml_index is not None else []
    session_id = new_session_id()
    meta, session = open_session(store, build_meta(spec, target), session_id=session_id,
                                 stale_mps_daemons_quit=[str(root) for root in stale])

    planned = runs if runs is not None else plan_runs(spec)
    if typed is not None:
        planned = runs_for_gpu_type(planned, typed)
    gpu_type = typed or target.gpu_type  # baselines from rows of this GPU type only

    def current_baselines() -> dict[JobType, SoloBaseline]:
        return baselines_from(store, gpu_type, typed_cells=typed is not None, session_id=session_id)

    todo = runs_to_measure(planned, store.finished_run_ids(), current_baselines())
    session["solos_measured_again"] = [r.run_id for r in todo if r.run_id in store.finished_run_ids()]

    baselines = current_baselines()
    tally = SessionTally(len(planned), len(planned) - len(todo), on_progress)
    try:
        with sigterm_as_interrupt(), WorkerPool(spec, target) as pool:
            for position, run in enumerate(todo):
                pids_hook = (lambda pids, run=run: on_run_start(run, pids)) if on_run_start else None
                record = execute_run(run, spec, target, baselines, pool=pool, on_pids=pids_hook,
                                     session_id=session_id)
                pool.retain(upcoming_block(todo, position))
                store.append_run(record.run, record.jobs)
                if run.cell.sharing == SHARING_SOLO:
                    baselines = current_baselines()
                    if spec.kernels:
                        problem = _profile_kernels_once(spec, store, run.cell.jobs[0], todo)
                        if problem:
                            meta.setdefault("kernel_errors", {})[run.cell.jobs[0].label] = problem
                tally.count(record)
    finally:
        tally.close(session)
        store.write_meta(meta)
    return store
