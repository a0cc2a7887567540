"""Execute one run: spawn one process per job, warm up, barrier, time the overlap window, tear down.

The coordinator (this module, in the campaign process) decides when to stop: once every job has at least
``min_window_iters`` iterations ending inside the common window and the window is ``min_window_seconds``
long. On any failure — an OOM, a crashed worker, an MPS client fault, a timeout — the partners are stopped
and the whole group is recorded (infeasible for OOM, failed otherwise). Processes never outlive a run:
they are joined, then terminated, then killed, and they die with the campaign process (PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from multiprocessing.connection import Connection, wait
from typing import Any

from profiler.cells import JobType, Run
from profiler.devices import DeviceTarget
from profiler.errors import SharingUnavailable
from profiler.metrics import JobTiming, delta, iteration_stats, overlap_window, slowdowns, throughput_sum
from profiler.nvml import NvmlSampler, NvmlSummary
from profiler.schema import (
    STATUS_FAILED,
    STATUS_INFEASIBLE,
    STATUS_OK,
    STATUS_SKIPPED,
)
from profiler.sharing import sharing_mode
from profiler.spec import CampaignSpec
from profiler.worker import JobConfig, job_main

STOP_GRACE_S = 15.0


@dataclass(frozen=True)
class SoloBaseline:
    """What the campaign knows of a job type measured alone."""

    iter_time_s: float | None  # mean t over ok solo repeats; None when none succeeded
    peak_memory_mib: float | None
    status: str  # ok | infeasible | failed | skipped | missing
    error: str = ""


@dataclass
class RunRecord:
    run: dict[str, Any]
    jobs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return str(self.run["status"])


class _RunFailure(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def _base_row(run: Run, spec: CampaignSpec, target: DeviceTarget) -> dict[str, Any]:
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
        "repeat": run.repeat,
        "status": STATUS_OK,
        "error": "",
        "delta": math.nan,
        "throughput_sum": math.nan,
        "max_slowdown": math.nan,
        "window_s": math.nan,
        "wall_s": math.nan,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **NvmlSummary().as_row(),
    }


def _job_rows(run: Run, status: str, error: str) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run.run_id, "cell_id": run.cell.cell_id, "job_index": i, "model": job.model,
            "batch_size": job.batch_size, "job_type": job.label, "iter_time_s": math.nan,
            "iter_time_std_s": math.nan, "solo_iter_time_s": math.nan, "slowdown": math.nan,
            "ratio": math.nan, "iters_in_window": 0, "peak_memory_mib": math.nan,
            "status": status, "error": error,
        }
        for i, job in enumerate(run.cell.jobs)
    ]


def not_run_record(run: Run, spec: CampaignSpec, target: DeviceTarget, status: str, reason: str) -> RunRecord:
    row = _base_row(run, spec, target)
    row.update(status=status, error=reason, wall_s=0.0)
    return RunRecord(row, _job_rows(run, status, reason))


def precheck(
    run: Run, spec: CampaignSpec, target: DeviceTarget, baselines: Mapping[JobType, SoloBaseline]
) -> RunRecord | None:
    """A record for a run that must not start (and why), or None when it may run."""
    cell = run.cell
    reason = sharing_mode(cell.sharing).unavailable_reason(spec.device)
    if reason:
        return not_run_record(run, spec, target, STATUS_SKIPPED, reason)
    if len(cell.jobs) == 1:
        return None
    for job in cell.jobs:
        base = baselines.get(job, SoloBaseline(None, None, "missing"))
        if base.status == STATUS_INFEASIBLE:
            return not_run_record(run, spec, target, STATUS_INFEASIBLE, f"{job.label} does not fit alone: {base.error}")
        if base.iter_time_s is None:
            why = base.error or "no solo run succeeded"
            return not_run_record(run, spec, target, STATUS_SKIPPED, f"no solo baseline for {job.label} ({why})")
    free = target.free_memory_mib()
    if free is not None:
        need = sum((baselines[j].peak_memory_mib or 0.0) + spec.memory_headroom_mib for j in cell.jobs)
        if need > free:
            return not_run_record(run, spec, target, STATUS_INFEASIBLE,
                            f"memory pre-check: solo peaks + {spec.memory_headroom_mib} MiB context per job = "
                            f"{need:.0f} MiB > {free:.0f} MiB free")
    return None


def execute_run(
    run: Run,
    spec: CampaignSpec,
    target: DeviceTarget,
    baselines: Mapping[JobType, SoloBaseline],
    *,
    on_pids: Callable[[list[int]], None] | None = None,
    sample_nvml: bool = True,
) -> RunRecord:
    """Run one cell repeat end to end and return its rows (never raises for job failures).

    ``sample_nvml=False`` turns the NVML sampler off (used by the sampler-overhead benchmark).
    """
    blocked = precheck(run, spec, target, baselines)
    if blocked is not None:
        return blocked
    row = _base_row(run, spec, target)
    wall_start = time.perf_counter()
    cell = run.cell
    try:
        with ExitStack() as stack:
            env = dict(target.worker_env())
            try:
                env.update(sharing_mode(cell.sharing).enter(stack, target.physical_gpu, cell.mps_thread_percentage))
            except SharingUnavailable as exc:
                return not_run_record(run, spec, target, STATUS_SKIPPED, str(exc))
            sampler = (stack.enter_context(NvmlSampler(target.nvml_index))
                       if target.nvml_index is not None and sample_nvml else None)
            configs = [
                JobConfig(
                    model=job.model, batch_size=job.batch_size, image_size=spec.image_size,
                    num_classes=spec.num_classes, device=target.worker_device,
                    seed=spec.seed + 1000 * run.repeat + i, warmup_iters=spec.warmup_iters,
                    threads=spec.threads_per_job, env=env,
                )
                for i, job in enumerate(cell.jobs)
            ]
            timings, ready = _coordinate(configs, spec, on_pids)
    except _RunFailure as failure:
        row.update(status=failure.status, error=str(failure), wall_s=time.perf_counter() - wall_start)
        return RunRecord(row, _job_rows(run, failure.status, str(failure)))

    window = overlap_window(timings)
    stats = [iteration_stats(t, window) for t in timings]
    row["wall_s"] = time.perf_counter() - wall_start
    row["window_s"] = max(window[1] - window[0], 0.0)
    if sampler is not None:
        row.update(sampler.summary(window).as_row())
    jobs = _job_rows(run, STATUS_OK, "")
    for job_row, stat, info in zip(jobs, stats, ready):
        job_row.update(iter_time_s=stat.mean_s, iter_time_std_s=stat.std_s, iters_in_window=stat.iterations,
                       peak_memory_mib=info["peak_memory_mib"])
    if any(stat.iterations == 0 for stat in stats):
        message = "jobs did not overlap long enough to time a full iteration each"
        row.update(status=STATUS_FAILED, error=message)
        for job_row in jobs:
            job_row.update(status=STATUS_FAILED, error=message)
        return RunRecord(row, jobs)
    if len(cell.jobs) > 1:
        solo = [baselines[job].iter_time_s for job in cell.jobs]
        colocated = [stat.mean_s for stat in stats]
        assert all(t is not None for t in solo)
        solo_f = [float(t) for t in solo]  # type: ignore[arg-type]
        per_job = slowdowns(solo_f, colocated)
        row.update(delta=delta(solo_f, colocated), throughput_sum=throughput_sum(solo_f, colocated),
                   max_slowdown=max(per_job))
        for job_row, t, slow in zip(jobs, solo_f, per_job):
            job_row.update(solo_iter_time_s=t, slowdown=slow, ratio=1.0 / slow)
    return RunRecord(row, jobs)


def _coordinate(
    configs: list[JobConfig], spec: CampaignSpec, on_pids: Callable[[list[int]], None] | None
) -> tuple[list[JobTiming], list[dict[str, Any]]]:
    context = worker_context()
    connections: list[Connection] = []
    processes: list[mp.process.BaseProcess] = []
    deadline = time.monotonic() + spec.run_timeout_s
    try:
        for config in configs:
            parent_end, child_end = context.Pipe(duplex=True)
            process = context.Process(target=job_main, args=(child_end, config), daemon=True,
                                      name=f"colocate-{config.model}@{config.batch_size}")
            process.start()
            child_end.close()
            connections.append(parent_end)
            processes.append(process)
        if on_pids is not None:
            on_pids([p.pid for p in processes if p.pid is not None])
        session = _Session(connections, processes, deadline)
        ready = session.collect("ready")
        session.broadcast(("go",))
        starts = session.collect("started")
        window_start = max(float(s) for s in starts)
        session.broadcast(("window", window_start))
        session.wait_for_window(window_start, spec.min_window_iters, spec.min_window_seconds)
        session.broadcast(("stop",))
        results = session.collect("result")
        timings = [JobTiming(float(r["start"]), list(r["ends"])) for r in results]
        for info, result in zip(ready, results):
            info["peak_memory_mib"] = max(info["peak_memory_mib"], result["peak_memory_mib"])
        return timings, ready
    finally:
        _teardown(connections, processes)


def worker_context() -> mp.context.ForkServerContext | mp.context.SpawnContext:
    """Start workers from a fork server that has torch imported but never touched CUDA.

    This keeps what the spawn method guarantees — a fresh process with no inherited CUDA state — while a
    new worker costs a fork instead of a Python start plus a torch import (seconds on a busy node). The
    server dies with the campaign process, and workers die with it (PDEATHSIG), so nothing is orphaned.
    """
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["torch", "models", "profiler.worker"])
    return context


class _Session:
    """Message pump over the workers' pipes; turns any worker failure into a :class:`_RunFailure`."""

    def __init__(self, connections: list[Connection], processes: list[Any], deadline: float) -> None:
        self.connections = connections
        self.processes = processes
        self.deadline = deadline
        self.progress = [0] * len(connections)
        self.inbox: list[dict[str, Any]] = [{} for _ in connections]

    def broadcast(self, message: tuple[Any, ...]) -> None:
        for index, connection in enumerate(self.connections):
            try:
                connection.send(message)
            except (BrokenPipeError, OSError):
                self._raise_exit(index)

    def _pump(self, timeout: float) -> None:
        if time.monotonic() > self.deadline:
            raise _RunFailure(STATUS_FAILED, "run timed out (run_timeout_s); partners stopped")
        readable = wait(self.connections + [p.sentinel for p in self.processes], timeout=timeout)
        for index, connection in enumerate(self.connections):
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
        for index, process in enumerate(self.processes):
            if process.sentinel in readable and "result" not in self.inbox[index]:
                # drain anything the worker sent before it exited, then report its exit
                with contextlib.suppress(EOFError, OSError):
                    while self.connections[index].poll():
                        self._handle(index, self.connections[index].recv())
                if "result" not in self.inbox[index]:
                    self._raise_exit(index)

    def _handle(self, index: int, message: tuple[Any, ...]) -> None:
        tag = message[0]
        if tag == "error":
            _, kind, text = message[:3]
            status = STATUS_INFEASIBLE if kind == "oom" else STATUS_FAILED
            name = self.processes[index].name.removeprefix("colocate-")
            prefix = "out of memory" if kind == "oom" else "worker failed"
            raise _RunFailure(status, f"{prefix} in job {index} ({name}): {text}; partners stopped")
        if tag == "progress":
            self.progress[index] = int(message[1])
        else:
            self.inbox[index][tag] = message[1]

    def _raise_exit(self, index: int) -> None:
        process = self.processes[index]
        process.join(timeout=1)
        name = process.name.removeprefix("colocate-")
        raise _RunFailure(STATUS_FAILED, f"job {index} ({name}) exited unexpectedly with code "
                                         f"{process.exitcode}; partners stopped")

    def collect(self, tag: str) -> list[Any]:
        while not all(tag in box for box in self.inbox):
            self._pump(timeout=0.5)
        return [box[tag] for box in self.inbox]

    def wait_for_window(self, window_start: float, min_iters: int | None, min_seconds: float | None) -> None:
        while True:
            enough_iters = min_iters is None or all(n >= min_iters + 1 for n in self.progress)
            enough_time = min_seconds is None or time.perf_counter() - window_start >= min_seconds
            if enough_iters and enough_time:
                return
            self._pump(timeout=0.05)


def _teardown(connections: list[Connection], processes: list[Any]) -> None:
    """Stop every worker: polite stop, then SIGTERM, then SIGKILL. Always leaves no process behind."""
    for connection in connections:
        with contextlib.suppress(Exception):
            connection.send(("stop",))
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        process.join(timeout=max(deadline - time.monotonic(), 0.1))
    for process in processes:
        if process.is_alive():
            process.terminate()
            process.join(timeout=3)
        if process.is_alive():
            process.kill()
            process.join(timeout=3)
    for connection in connections:
        with contextlib.suppress(Exception):
            connection.close()
