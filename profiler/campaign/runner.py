"""Execute one run: get one process per job, warm them up one at a time, barrier, time the overlap window.

Warm-up is serial: the coordinator hands the turn to one group member at a time, and releases the start barrier only
when all are warm — lazy cuBLAS/cuDNN initialisation and workspace allocation while a partner also warms up would run
under its memory pressure and time (cuDNN algorithms themselves are fixed by heuristics, see
:mod:`profiler.measure.training`). The coordinator (this module, in the campaign process) decides when to stop: once
every job has at least ``min_window_iters`` iterations ending inside the common window and the window is
``min_window_seconds`` long. The stop carries the coordinator's clock, and each job runs until an iteration has ended
after it, so the window (which ends at the earliest last end) holds every iteration the decision counted even when a
job lost the CPU between an iteration and reading the stop. Under MPS, every worker pid is checked to be a client of
our daemon once the window has started; a worker that is not (it could not reach the daemon and ran as plain CUDA), or
an MPS client that dies before it said hello, makes the run *skipped* with the reason and marks the mode broken for
the session (:meth:`profiler.campaign.pool.WorkerPool.mark_broken`): later runs of the mode are skipped at once, and a
resumed campaign on another machine tries them again. On any other failure — an OOM, a crashed worker, a timeout — the
partners are stopped and the whole group is recorded (infeasible for OOM, failed otherwise). Processes never outlive
the campaign: they are joined, then terminated, then killed, and die with it (PDEATHSIG).

Every member says hello (built, on the device) before the first one warms up: a cold partner building its
model and copying it to the GPU would otherwise disturb member 0's warm-up. Device memory per process (NVML)
is read once the window has run, when each allocator holds its steady-state cache.
"""

from __future__ import annotations

import contextlib
import math
import socket
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from multiprocessing.connection import wait
from typing import Any

from common.errors import SharingUnavailable
from profiler.campaign.cells import Cell, JobType, Run
from profiler.campaign.pool import Worker, WorkerPool
from profiler.campaign.spec import CampaignSpec
from profiler.gpu.devices import DeviceTarget
from profiler.gpu.nvml import NvmlSampler, NvmlSummary, process_memory_mib
from profiler.gpu.sharing import sharing_mode
from profiler.measure.metrics import JobTiming, delta, iteration_stats, overlap_window, slowdowns, throughput_sum
from profiler.results.schema import (
    STATUS_FAILED,
    STATUS_INFEASIBLE,
    STATUS_OK,
    STATUS_SKIPPED,
)

__all__ = ["RunRecord", "SoloBaseline", "execute_run", "not_run_record", "precheck"]


@dataclass(frozen=True)
class SoloBaseline:
    """What the campaign knows of a job type measured alone."""

    iter_time_s: float | None  # mean t over ok solo repeats; None when none succeeded
    peak_memory_mib: float | None  # steady-state peak reserved by the allocator (GPU) / RSS growth (CPU)
    status: str  # ok | infeasible | failed | skipped | missing
    error: str = ""
    process_memory_mib: float | None = None  # NVML: the solo process's device memory, CUDA context included

    def memory_need_mib(self, headroom_mib: float) -> float:
        """What the job needs on the device: the larger of NVML's per-process figure (read after the window:
        context + steady-state cache) and the allocator peak + headroom — an NVML figure that came out low
        (read too early, or a driver that counts differently) never lowers the allocator's."""
        need = (self.peak_memory_mib or 0.0) + headroom_mib
        if self.process_memory_mib is not None and not math.isnan(self.process_memory_mib):
            need = max(need, self.process_memory_mib)
        return need


@dataclass
class RunRecord:
    run: dict[str, Any]
    jobs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return str(self.run["status"])


class _RunFailure(Exception):
    def __init__(self, status: str, message: str, *, service_broken: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.service_broken = service_broken  # the mode's service (MPS) did not serve its clients


def _base_row(run: Run, spec: CampaignSpec, target: DeviceTarget, session_id: str | None) -> dict[str, Any]:
    cell = run.cell
    return {
        "run_id": run.run_id,
        "cell_id": cell.cell_id,
        "campaign": spec.name,
        "kind": cell.kind,
        "group_size": len(cell.jobs),
        "device": spec.device,
        "gpu_name": target.name,
        "gpu_type": target.gpu_type,
        "sharing": cell.sharing,
        "mps_thread_percentage": cell.mps_thread_percentage,
        "models": "+".join(j.model for j in cell.jobs),
        "batch_sizes": "+".join(str(j.batch_size) for j in cell.jobs),
        "job_types": "+".join(j.label for j in cell.jobs),
        "image_size": spec.image_size,
        "precision": cell.precision,
        "seq_len": spec.seq_len,
        "repeat": run.repeat,
        "status": STATUS_OK,
        "error": "",
        "delta": math.nan,
        "throughput_sum": math.nan,
        "max_slowdown": math.nan,
        "window_s": math.nan,
        "wall_s": math.nan,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "session_id": session_id, "host": socket.gethostname(), "gpu_uuid": target.uuid, "driver": target.driver,
        **NvmlSummary().as_row(),
    }


def _job_rows(run: Run, status: str, error: str) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run.run_id, "cell_id": run.cell.cell_id, "job_index": i, "model": job.model,
            "batch_size": job.batch_size, "job_type": job.label, "iter_time_s": math.nan,
            "iter_time_std_s": math.nan, "solo_iter_time_s": math.nan, "slowdown": math.nan,
            "ratio": math.nan, "iters_in_window": 0, "peak_memory_mib": math.nan,
            "peak_allocated_mib": math.nan, "nvml_process_memory_mib": math.nan, "precision": job.precision,
            "status": status, "error": error,
        }
        for i, job in enumerate(run.cell.jobs)
    ]


def not_run_record(run: Run, spec: CampaignSpec, target: DeviceTarget, status: str, reason: str,
                   session_id: str | None = None) -> RunRecord:
    row = _base_row(run, spec, target, session_id)
    row.update(status=status, error=reason, wall_s=0.0)
    return RunRecord(row, _job_rows(run, status, reason))


def memory_need(run: Run, spec: CampaignSpec, baselines: Mapping[JobType, SoloBaseline]) -> float | None:
    """Device memory ``run``'s members need, from their solo baselines; None when a member has no figure yet
    (a job type's first solo)."""
    need = 0.0
    for job in run.cell.jobs:
        base = baselines.get(job)
        if base is None or base.iter_time_s is None:
            return None
        need += base.memory_need_mib(spec.memory_headroom_mib)
    return need


def precheck(
    run: Run, spec: CampaignSpec, target: DeviceTarget, baselines: Mapping[JobType, SoloBaseline],
    session_id: str | None = None,
) -> RunRecord | None:
    """A record for a run that must not start (and why), or None when it may run.

    Groups need every member's solo baseline; groups, and solos whose job type already has one (a later
    repeat), must fit in the device's free memory.
    """
    cell = run.cell
    reason = sharing_mode(cell.sharing).unavailable_reason(spec.device)
    if reason:
        return not_run_record(run, spec, target, STATUS_SKIPPED, reason, session_id)
    if len(cell.jobs) > 1:
        for job in cell.jobs:
            base = baselines.get(job, SoloBaseline(None, None, "missing"))
            if base.status == STATUS_INFEASIBLE:
                return not_run_record(run, spec, target, STATUS_INFEASIBLE,
                                      f"{job.label} does not fit alone: {base.error}", session_id)
            if base.iter_time_s is None:
                why = base.error or "no solo run succeeded"
                return not_run_record(run, spec, target, STATUS_SKIPPED,
                                      f"no solo baseline for {job.label} ({why})", session_id)
    free = target.free_memory_mib()
    need = memory_need(run, spec, baselines)
    if free is not None and need is not None and need > free:
        return not_run_record(run, spec, target, STATUS_INFEASIBLE,
                              f"{MEMORY_PRECHECK}: the members' solo device memory (max of NVML, context "
                              f"included, and allocator peak + {spec.memory_headroom_mib} MiB) = {need:.0f} MiB > "
                              f"{free:.0f} MiB free", session_id)
    return None


MEMORY_PRECHECK = "memory pre-check"


def _make_room(run: Run, spec: CampaignSpec, target: DeviceTarget, baselines: Mapping[JobType, SoloBaseline],
               pool: WorkerPool) -> bool:
    """Stop the idle workers when that lets ``run`` fit (not when the group cannot fit an empty GPU either);
    True when it stopped any."""
    need, free = memory_need(run, spec, baselines), target.free_memory_mib()
    if not pool.idle or need is None or free is None:
        return False
    if need > free + pool.idle_memory_mib(target, baselines):
        return False
    return pool.evict_idle()


def execute_run(
    run: Run,
    spec: CampaignSpec,
    target: DeviceTarget,
    baselines: Mapping[JobType, SoloBaseline],
    *,
    pool: WorkerPool | None = None,
    on_pids: Callable[[list[int]], None] | None = None,
    sample_nvml: bool = True,
    session_id: str | None = None,
) -> RunRecord:
    """Run one cell repeat end to end and return its rows (never raises for job failures).

    ``pool`` lends warm workers (the campaign's); without one, fresh processes serve this run only.
    ``sample_nvml=False`` turns the NVML sampler off (used by the sampler-overhead benchmark).
    ``session_id`` is recorded in the run's row (which campaign invocation measured it).
    """
    blocked = precheck(run, spec, target, baselines, session_id)
    if (blocked is not None and blocked.status == STATUS_INFEASIBLE and pool is not None
            and str(blocked.run["error"]).startswith(MEMORY_PRECHECK) and _make_room(run, spec, target, baselines, pool)):
        blocked = precheck(run, spec, target, baselines, session_id)  # idle workers' memory is free again
    if blocked is not None:
        return blocked
    with ExitStack() as stack:
        if pool is None:
            pool = stack.enter_context(WorkerPool(spec, target, reuse=False))
        record = _measure(run, spec, target, baselines, pool, on_pids, sample_nvml, session_id)
        if record.status == STATUS_INFEASIBLE and target.nvml_index is not None and pool.evict_idle():
            # out of memory beside idle workers of ours: measure again on a GPU holding only this run
            record = _measure(run, spec, target, baselines, pool, on_pids, sample_nvml, session_id)
        return record


def _measure(run: Run, spec: CampaignSpec, target: DeviceTarget, baselines: Mapping[JobType, SoloBaseline],
             pool: WorkerPool, on_pids: Callable[[list[int]], None] | None, sample_nvml: bool,
             session_id: str | None = None) -> RunRecord:
    row = _base_row(run, spec, target, session_id)
    wall_start = time.perf_counter()
    cell = run.cell
    workers: list[Worker] = []
    healthy = False
    try:
        with ExitStack() as stack:
            try:
                workers = pool.acquire(cell)  # starts the mode's service (the MPS daemon) when it needs one
            except SharingUnavailable as exc:
                return not_run_record(run, spec, target, STATUS_SKIPPED, str(exc), session_id)
            sampler = (stack.enter_context(NvmlSampler(target.nvml_index))
                       if target.nvml_index is not None and sample_nvml else None)
            measured = _coordinate(workers, pool, spec, target, cell, on_pids)
        healthy = True
    except _RunFailure as failure:
        status = failure.status
        if failure.service_broken:  # MPS itself failed here: skipped (tried again elsewhere), not a result
            status = STATUS_SKIPPED
            pool.mark_broken(cell, str(failure))
        row.update(status=status, error=str(failure), wall_s=time.perf_counter() - wall_start)
        return RunRecord(row, _job_rows(run, status, str(failure)))
    finally:
        pool.release(workers, healthy)
    timings, results, process_memory = measured
    window = overlap_window(timings)
    stats = [iteration_stats(t, window) for t in timings]
    row["wall_s"] = time.perf_counter() - wall_start
    row["window_s"] = max(window[1] - window[0], 0.0)
    if sampler is not None:
        row.update(sampler.summary(window).as_row())
    jobs = _job_rows(run, STATUS_OK, "")
    for job_row, stat, result, nvml_mib in zip(jobs, stats, results, process_memory):
        job_row.update(iter_time_s=stat.mean_s, iter_time_std_s=stat.std_s, iters_in_window=stat.iterations,
                       peak_memory_mib=result["peak_reserved_mib"], peak_allocated_mib=result["peak_allocated_mib"],
                       nvml_process_memory_mib=math.nan if nvml_mib is None else nvml_mib)
    if any(stat.iterations == 0 for stat in stats):
        message = "jobs did not overlap long enough to time a full iteration each"
        row.update(status=STATUS_FAILED, error=message)
        for job_row in jobs:
            job_row.update(status=STATUS_FAILED, error=message)
        return RunRecord(row, jobs)
    if len(cell.jobs) > 1:
        _add_delta(row, jobs, [baselines[job].iter_time_s for job in cell.jobs], [stat.mean_s for stat in stats])
    return RunRecord(row, jobs)


def _add_delta(row: dict[str, Any], jobs: list[dict[str, Any]], solo: list[float | None],
               colocated: list[float]) -> None:
    assert all(t is not None for t in solo)
    solo_f = [float(t) for t in solo]  # type: ignore[arg-type]
    per_job = slowdowns(solo_f, colocated)
    row.update(delta=delta(solo_f, colocated), throughput_sum=throughput_sum(solo_f, colocated),
               max_slowdown=max(per_job))
    for job_row, t, slow in zip(jobs, solo_f, per_job):
        job_row.update(solo_iter_time_s=t, slowdown=slow, ratio=1.0 / slow)


def _coordinate(
    workers: list[Worker], pool: WorkerPool, spec: CampaignSpec, target: DeviceTarget, cell: Cell | None,
    on_pids: Callable[[list[int]], None] | None,
) -> tuple[list[JobTiming], list[dict[str, Any]], list[float | None]]:
    """Warm up, start together, time the window, stop; ``cell``'s mode proves its clients (None: no proof)."""
    if on_pids is not None:
        on_pids([w.pid for w in workers])
    session = _Session(workers, time.monotonic() + spec.run_timeout_s, served=pool.check_clients_needed(cell))
    session.wait_for_hellos()  # every member built and on the device before member 0 warms up
    ready = []
    for index, worker in enumerate(workers):  # one member at a time: the coordinator hands out the turn
        session.send(index, ("warmup", pool.warmup_iterations(worker)))
        ready.extend(session.collect("ready", only=index))
    session.broadcast(("go",))
    starts = session.collect("started")
    window_start = max(float(s) for s in starts)
    session.broadcast(("window", window_start))
    not_served = pool.check_clients(cell, workers) if cell is not None else None  # MPS: all clients of our daemon
    if not_served:
        raise _RunFailure(STATUS_SKIPPED, not_served, service_broken=True)
    session.wait_for_window(window_start, spec.min_window_iters, spec.min_window_seconds)
    # read once the window has run: each allocator holds its steady-state cache (at the window's start the
    # first iterations may still be re-reserving it); per process, so idle workers do not count
    process_memory: list[float | None] = [None] * len(workers)
    if target.nvml_index is not None:
        process_memory = [process_memory_mib(target.nvml_index, worker.pid) for worker in workers]
    session.broadcast(("stop", time.perf_counter()))  # each job runs until an iteration ends after this
    results = [{**result, "warmup_span": info["warmup_span"]} for result, info in zip(session.collect("result"), ready)]
    timings = [JobTiming(float(r["start"]), list(r["ends"])) for r in results]
    return timings, results, process_memory




class _Session:
    """Message pump over one run's workers; turns any worker failure into a :class:`_RunFailure`."""

    def __init__(self, workers: list[Worker], deadline: float, served: bool = False) -> None:
        self.workers = workers
        self.deadline = deadline
        self.served = served  # clients of a service (MPS): a death before hello means the service failed them
        self.progress = [0] * len(workers)
        self.inbox: list[dict[str, Any]] = [{} for _ in workers]

    def send(self, index: int, message: tuple[Any, ...]) -> None:
        try:
            self.workers[index].conn.send(message)
        except (BrokenPipeError, OSError):
            self._raise_exit(index)

    def broadcast(self, message: tuple[Any, ...]) -> None:
        for index in range(len(self.workers)):
            self.send(index, message)

    def _pump(self, timeout: float) -> None:
        if time.monotonic() > self.deadline:
            raise _RunFailure(STATUS_FAILED, "run timed out (run_timeout_s); partners stopped")
        connections = [w.conn for w in self.workers]
        readable = wait(connections + [w.process.sentinel for w in self.workers], timeout=timeout)
        for index, connection in enumerate(connections):
            if connection not in readable:
                continue
            while True:
                try:
                    if not connection.poll():
                        break
                    message = connection.recv()
                except (EOFError, OSError):  # the worker closed its end; its exit is judged below
                    if "result" in self.inbox[index]:
                        break
                    self._raise_exit(index)
                self._handle(index, message)
        for index, worker in enumerate(self.workers):
            if worker.process.sentinel in readable and "result" not in self.inbox[index]:
                # drain anything the worker sent before it exited, then report its exit
                with contextlib.suppress(EOFError, OSError):
                    while connections[index].poll():
                        self._handle(index, connections[index].recv())
                if "result" not in self.inbox[index]:
                    self._raise_exit(index)

    def _handle(self, index: int, message: tuple[Any, ...]) -> None:
        tag = message[0]
        worker = self.workers[index]
        if tag == "error":
            _, kind, text = message[:3]
            if kind != "oom" and self.served and worker.hello is None:
                raise _RunFailure(STATUS_SKIPPED, f"MPS client {index} ({worker.name}) failed before it reached "
                                                  f"the device: {text}", service_broken=True)
            status = STATUS_INFEASIBLE if kind == "oom" else STATUS_FAILED
            prefix = "out of memory" if kind == "oom" else "worker failed"
            raise _RunFailure(status, f"{prefix} in job {index} ({worker.name}): {text}; partners stopped")
        if tag == "progress":
            self.progress[index] = int(message[1])
        elif tag == "hello":
            worker.hello = message[1]
            seen = message[1]["env"].get("CUDA_MPS_PIPE_DIRECTORY")
            if seen != worker.expected_pipe_dir:
                raise _RunFailure(STATUS_FAILED, f"job {index} ({worker.name}) sees CUDA_MPS_PIPE_DIRECTORY="
                                                 f"{seen!r}, expected {worker.expected_pipe_dir!r}")
        else:
            self.inbox[index][tag] = message[1]

    def _raise_exit(self, index: int) -> None:
        worker = self.workers[index]
        worker.process.join(timeout=1)
        message = (f"job {index} ({worker.name}) exited unexpectedly with code {worker.process.exitcode}; "
                   "partners stopped")
        if self.served and worker.hello is None:  # an MPS client died connecting: the service failed it
            raise _RunFailure(STATUS_SKIPPED, f"MPS client {message}", service_broken=True)
        raise _RunFailure(STATUS_FAILED, message)

    def wait_for_hellos(self) -> None:
        """Block until every worker has said hello (warm workers did so in an earlier run)."""
        while any(worker.hello is None for worker in self.workers):
            self._pump(timeout=0.5)

    def collect(self, tag: str, only: int | None = None) -> list[Any]:
        boxes = self.inbox if only is None else [self.inbox[only]]
        while not all(tag in box for box in boxes):
            self._pump(timeout=0.5)
        return [box.pop(tag) if only is not None else box[tag] for box in boxes]

    def wait_for_window(self, window_start: float, min_iters: int | None, min_seconds: float | None) -> None:
        while True:
            enough_iters = min_iters is None or all(n >= min_iters + 1 for n in self.progress)
            enough_time = min_seconds is None or time.perf_counter() - window_start >= min_seconds
            if enough_iters and enough_time:
                return
            self._pump(timeout=0.05)
