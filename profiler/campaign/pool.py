"""Worker processes of a campaign, kept warm across the runs that need them, and the MPS daemon they use.

``workers: warm`` (the default): a worker that finished a run in good health goes back to the pool idle
(its allocator cache emptied) and serves the next run of its job type after a short re-warm; it is stopped
once no run of the current batch-size block needs it. ``workers: fresh``: every run starts new processes
and stops them afterwards (the Ray backend always works this way).

A worker is keyed by job type and *sharing mode*: a plain CUDA process can never join an MPS daemon later,
and an MPS client is bound to its daemon and its thread percentage. What a mode needs comes from the
sharing-mode registry (:mod:`profiler.gpu.sharing`): a mode with a service (MPS: a private daemon) has it started
once and kept for the runs of that mode; it is stopped (after its clients: ``quit`` waits for clients) before
any run of a plain mode, and when no idle client needs it any more. Workers get the environment the mode's
``worker_environment`` hook gives: plain modes a private, empty ``CUDA_MPS_PIPE_DIRECTORY`` (and no inherited
``CUDA_MPS_*`` variables), so no MPS daemon on the host can capture them.

A mode whose service failed here (the daemon did not start, or a client could not reach it) is remembered as
broken for the rest of the session (:meth:`WorkerPool.mark_broken`): its later runs are skipped at once with
the first failure's reason instead of each waiting for another daemon start.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import shutil
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from common.errors import SharingUnavailable
from profiler.campaign.cells import Cell, JobType, Run
from profiler.campaign.spec import CampaignSpec
from profiler.gpu.devices import DeviceTarget
from profiler.gpu.mps import isolated_root
from profiler.gpu.sharing import SharingMode, sharing_mode
from profiler.measure.worker import JobConfig, job_main

STOP_GRACE_S = 15.0
REWARM_ITERS = 1  # a reused CUDA worker re-grows its emptied allocator cache (one iteration re-reserves it)
PLAIN = "plain"


def worker_context() -> mp.context.ForkServerContext | mp.context.SpawnContext:
    """Start workers from a fork server that has torch imported but never touched CUDA.

    This keeps what the spawn method guarantees — a fresh process with no inherited CUDA state — while a
    new worker costs a fork instead of a Python start plus a torch import (seconds on a busy node). The
    server dies with the campaign process, and workers die with it (PDEATHSIG), so nothing is orphaned.
    """
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["torch", "models", "profiler.measure.worker"])
    return context


def mode_key(cell: Cell) -> str:
    """Which processes may serve ``cell``: plain ones, or clients of its mode's service (``mps``, ``mps50``)."""
    mode = sharing_mode(cell.sharing)
    return PLAIN if mode.start_service is None else mode.mode_label(cell.mps_thread_percentage)


@dataclass(frozen=True)
class WorkerKey:
    job: JobType
    mode: str


@dataclass(eq=False)
class Worker:
    """One job process and the coordinator's end of its pipe."""

    key: WorkerKey
    process: Any
    conn: Connection
    expected_pipe_dir: str | None  # the CUDA_MPS_PIPE_DIRECTORY the worker must report in its hello
    warm: bool = False
    hello: dict[str, Any] | None = None
    runs: int = 0

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    @property
    def name(self) -> str:
        return self.key.job.label


@dataclass
class WorkerPool:
    """Starts, lends, keeps and stops the job processes of one campaign session (a context manager)."""

    spec: CampaignSpec
    target: DeviceTarget
    reuse: bool | None = None
    idle: list[Worker] = field(default_factory=list)
    daemon: Any = None  # the running service's handle (MPS: our MpsDaemon), owned by ``service_mode``
    service_mode: SharingMode | None = None
    started: int = 0
    broken: dict[str, str] = field(default_factory=dict)  # mode name -> why its service failed this session

    def __post_init__(self) -> None:
        if self.reuse is None:
            self.reuse = self.spec.workers == "warm"
        self._context = worker_context()
        self._isolation = isolated_root()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- lending -----------------------------------------------------------------------------------
    def acquire(self, cell: Cell) -> list[Worker]:
        """Workers for ``cell``'s jobs: idle ones of the same key first, new ones otherwise.

        Raises :class:`common.errors.SharingUnavailable` when the cell's mode cannot start its service.
        """
        mode = sharing_mode(cell.sharing)
        if mode.name in self.broken:
            raise SharingUnavailable(f"{mode.label} failed earlier in this session: {self.broken[mode.name]}")
        if mode.start_service is None or self.service_mode not in (None, mode):
            self._close_service()  # never measure a plain run beside our own daemon
        if mode.start_service is not None and self.daemon is None:
            try:
                self.open_service(mode)
            except SharingUnavailable as exc:
                self.broken[mode.name] = str(exc)
                raise
        chosen: list[Worker] = []
        for job in cell.jobs:
            key = WorkerKey(job, mode_key(cell))
            found = next((w for w in self.idle if w.key == key and w.process.is_alive()), None)
            if found is not None:
                self.idle.remove(found)
                chosen.append(found)
            else:
                chosen.append(self._start(key, cell))
        return chosen

    def open_service(self, mode: SharingMode) -> None:
        """Start ``mode``'s service (its set-up hook) for the runs to come; the pool stops it."""
        assert mode.start_service is not None and self.daemon is None
        self.daemon = mode.start_service(self.target.pin, self.target.nvml_index)
        self.service_mode = mode

    def mark_broken(self, cell: Cell, reason: str) -> None:
        """``cell``'s mode failed its clients here: skip its later runs this session (see the module doc)."""
        self.broken.setdefault(sharing_mode(cell.sharing).name, reason)

    def check_clients_needed(self, cell: Cell | None) -> bool:
        """Whether ``cell``'s workers are clients of a running service (whose failures are the service's)."""
        return cell is not None and sharing_mode(cell.sharing).start_service is not None and self.daemon is not None

    def idle_memory_mib(self, target: DeviceTarget, baselines: Mapping[JobType, Any]) -> float:
        """Device memory the idle workers hold: NVML's per-process figure, else their job type's solo need."""
        from profiler.gpu.nvml import process_memory_mib

        held = 0.0
        for worker in self.idle:
            measured = process_memory_mib(target.nvml_index, worker.pid) if target.nvml_index is not None else None
            base = baselines.get(worker.key.job)
            estimate = base.memory_need_mib(self.spec.memory_headroom_mib) if base is not None else 0.0
            held += measured if measured is not None else estimate
        return held

    def check_clients(self, cell: Cell, workers: Sequence[Worker]) -> str | None:
        """Why ``workers`` are not served by ``cell``'s service (they ran as plain CUDA), or None."""
        mode = sharing_mode(cell.sharing)
        if mode.start_service is None or self.daemon is None:
            return None
        return mode.check_clients(self.daemon, [(w.name, w.pid) for w in workers])

    def warmup_iterations(self, worker: Worker) -> int:
        """A cold worker's full warm-up; a warm one re-warms on CUDA only (it emptied its cache when idle;
        a CPU worker released nothing)."""
        if not worker.warm:
            return self.spec.warmup_iters
        return min(REWARM_ITERS, self.spec.warmup_iters) if self.spec.is_cuda else 0

    def release(self, workers: Sequence[Worker], healthy: bool) -> None:
        """Take workers back after a run: idle when healthy and reuse is on, stopped otherwise.

        A failed MPS run also ends the daemon and all its clients: a fatal fault in one client kills them all.
        """
        for worker in workers:
            worker.runs += 1
        if healthy and self.reuse:
            for worker in workers:
                worker.warm = True
            self.idle.extend(workers)
            return
        stop_workers(workers)
        if not healthy and any(w.key.mode != PLAIN for w in workers):
            self._close_service()

    def retain(self, upcoming: Iterable[Run]) -> None:
        """Stop idle workers that none of ``upcoming`` needs (the caller passes the current block)."""
        needed: Counter[WorkerKey] = Counter()
        for run in upcoming:
            counts = Counter(WorkerKey(job, mode_key(run.cell)) for job in run.cell.jobs)
            for key, count in counts.items():
                needed[key] = max(needed[key], count)
        keep: list[Worker] = []
        drop: list[Worker] = []
        for worker in self.idle:
            if needed[worker.key] > 0 and worker.process.is_alive():
                needed[worker.key] -= 1
                keep.append(worker)
            else:
                drop.append(worker)
        self.idle = keep
        stop_workers(drop)
        if self.daemon is not None and not any(w.key.mode != PLAIN for w in self.idle):
            self._close_service()

    def evict_idle(self) -> bool:
        """Stop every idle worker (their memory is needed); True when there was any."""
        had = bool(self.idle)
        stop_workers(self.idle)
        self.idle = []
        return had

    def close(self) -> None:
        self.evict_idle()
        self._close_service()
        shutil.rmtree(self._isolation, ignore_errors=True)

    # -- internals ---------------------------------------------------------------------------------
    def _close_service(self) -> None:
        clients = [w for w in self.idle if w.key.mode != PLAIN]
        stop_workers(clients)
        self.idle = [w for w in self.idle if w.key.mode == PLAIN]
        if self.daemon is not None and self.service_mode is not None:
            self.service_mode.stop_service(self.daemon)  # the mode's tear-down hook
        self.daemon = self.service_mode = None

    def _start(self, key: WorkerKey, cell: Cell) -> Worker:
        environment = sharing_mode(cell.sharing).worker_environment(
            self.daemon, self._isolation, self.target.worker_env(), cell.mps_thread_percentage)
        env, unset, pipe = environment.env, environment.unset, environment.pipe_dir
        spec, job = self.spec, key.job
        config = JobConfig(model=job.model, batch_size=job.batch_size, image_size=spec.image_size,
                           num_classes=spec.num_classes, device=self.target.worker_device,
                           seed=spec.seed + self.started, warmup_iters=spec.warmup_iters,
                           threads=spec.threads_per_job, env=env, unset_env=unset, precision=job.precision,
                           seq_len=spec.seq_len)
        self.started += 1
        parent_end, child_end = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=job_main, args=(child_end, config), daemon=True, name=f"colocate-{job.label}")
        process.start()
        child_end.close()
        return Worker(key, process, parent_end, pipe)


def stop_workers(workers: Iterable[Worker]) -> None:
    """Stop workers: polite exit, then SIGTERM, then SIGKILL. Always leaves no process behind."""
    workers = list(workers)
    for worker in workers:
        with contextlib.suppress(Exception):
            worker.conn.send(("stop", -math.inf))  # at once: no iteration is being timed
            worker.conn.send(("exit",))
    deadline = time.monotonic() + STOP_GRACE_S
    for worker in workers:
        worker.process.join(timeout=max(deadline - time.monotonic(), 0.1))
    for worker in workers:
        if worker.process.is_alive():
            worker.process.terminate()
            worker.process.join(timeout=3)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(timeout=3)
        with contextlib.suppress(Exception):
            worker.conn.close()


def upcoming_block(todo: Sequence[Run], position: int) -> list[Run]:
    """The runs after ``position`` that belong to the next run's batch-size block (what idle workers may serve)."""
    rest = list(todo[position + 1:])
    if not rest:
        return []
    batch = rest[0].cell.batch_key
    block = []
    for run in rest:
        if run.cell.batch_key != batch:
            break
        block.append(run)
    return block

