"""One training job in its own OS process: build once, then warm up, run timed windows, idle — on command.

A worker may serve several runs of its job type (warm workers, see :mod:`profiler.campaign.pool`). Protocol with
the coordinator (``profiler.campaign.runner``) over a duplex ``multiprocessing`` pipe:

====================  =========================================================================
worker → coordinator  ``("hello", info)`` once built (pid, the CUDA_MPS_* environment it sees);
                      ``("ready", info)`` after a warm-up; ``("started", t0)`` when timing begins;
                      ``("progress", n)`` iterations ended inside the window so far (~10 Hz);
                      ``("result", payload)`` after stop; ``("error", kind, message)`` on failure
coordinator → worker  ``("warmup", n)`` = warm up now (the coordinator hands out the turn: one group
                      member at a time); ``("go",)`` = start barrier; ``("window", t)`` = common window
                      start; ``("stop", t)`` = stop once an iteration has ended at or after ``t``
                      (the coordinator's clock when it sent the stop); ``("exit",)``
====================  =========================================================================

Timestamps are ``time.perf_counter()`` values (CLOCK_MONOTONIC on Linux: comparable across processes).
On CUDA each iteration's end is a CUDA event (no per-iteration synchronize: that would change what is
measured), converted to host time through one anchor taken after a synchronize at the window start. At
most :data:`MAX_IN_FLIGHT` iterations are queued ahead of the GPU, so a stop does not drain a long queue.

Memory: after each warm-up the allocator cache is emptied (dropping one-off workspaces), then one more
iteration re-grows it to its steady-state size *before* the peak statistics are reset and the window may
start: no ``cudaMalloc`` happens inside the timed window, and the reported peaks (allocated and reserved)
are those of steady-state iterations. Between runs an idle worker empties its cache again, so idle workers
hold only weights, optimizer state and their context; the next warm-up re-grows it the same way.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import resource
import signal
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from common.signals import die_with_parent

PROGRESS_INTERVAL_S = 0.1
MAX_IN_FLIGHT = 2  # CUDA iterations queued ahead of the GPU
OOM_MARKERS = ("out of memory", "alloc_failed", "cudaerrormemoryallocation", "can't allocate memory",
               "not enough memory")


@dataclass(frozen=True)
class JobConfig:
    model: str
    batch_size: int
    image_size: int
    num_classes: int
    device: str  # "cpu" or "cuda:0" (plain workers see one GPU; MPS clients see the daemon's one GPU)
    seed: int
    warmup_iters: int
    threads: int
    env: dict[str, str] = field(default_factory=dict)  # applied before torch touches CUDA (MPS pipes, %)
    unset_env: tuple[str, ...] = ()  # removed before torch touches CUDA (e.g. CUDA_VISIBLE_DEVICES for MPS)
    nvtx: bool = True
    precision: str = "fp32"
    seq_len: int = 128


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure, however it surfaced (torch OOM types, CUDA, cuBLAS, cuDNN)."""
    with contextlib.suppress(Exception):
        import torch

        oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                      getattr(torch.cuda, "OutOfMemoryError", None)) if isinstance(t, type))
        if oom_types and isinstance(exc, oom_types):
            return True
    text = str(exc).lower()
    return any(marker in text for marker in OOM_MARKERS)


def apply_environment(config: JobConfig, environ: Any = os.environ) -> None:
    """Drop every inherited CUDA_MPS_* variable and ``unset_env``, then apply ``config.env``.

    A non-MPS worker thus sees only its private, empty pipe directory (it can never join a daemon that
    happens to run on the host), and an MPS client only the pipe of our daemon.
    """
    for key in [k for k in environ if k.startswith("CUDA_MPS_") or k in config.unset_env]:
        del environ[key]
    environ.update(config.env)


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


class _Ranges:
    """NVTX ranges via ``torch.cuda.nvtx`` (no extra package; no-ops without CUDA or without a profiler)."""

    def __init__(self, enabled: bool) -> None:
        self._nvtx: Any = None
        if enabled:
            with contextlib.suppress(Exception):
                import torch

                if torch.cuda.is_available():
                    self._nvtx = torch.cuda.nvtx

    def push(self, name: str) -> None:
        if self._nvtx is not None:
            self._nvtx.range_push(f"colocate:{name}")

    def pop(self) -> None:
        if self._nvtx is not None:
            self._nvtx.range_pop()


def job_main(conn: Connection, config: JobConfig) -> None:
    """Process entry point. Never raises: every failure becomes an ``("error", ...)`` message."""
    die_with_parent()  # a killed campaign leaves no orphans
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the coordinator stops us
    parent = os.getppid()
    apply_environment(config)
    try:
        _Job(conn, config, parent).serve()
    except Exception as exc:  # reported, then the process exits non-zero
        kind = "oom" if is_out_of_memory(exc) else "crash"
        message = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
        with contextlib.suppress(Exception):
            conn.send(("error", kind, message, traceback.format_exc(limit=4)))
        sys.exit(1)
    finally:
        with contextlib.suppress(Exception):
            conn.close()


class _Job:
    def __init__(self, conn: Connection, config: JobConfig, parent: int) -> None:
        import torch

        from profiler.measure.training import make_training_step

        self.conn, self.config, self.parent = conn, config, parent
        torch.set_num_threads(config.threads)
        self.torch = torch
        self.device = torch.device(config.device)
        self.on_cuda = self.device.type == "cuda"
        self.ranges = _Ranges(config.nvtx)
        self.rss_before = _rss_mib()
        self.step = make_training_step(config.model, config.batch_size, image_size=config.image_size,
                                       num_classes=config.num_classes, device=self.device, seed=config.seed,
                                       precision=config.precision, seq_len=config.seq_len)
        mps_env = {k: v for k, v in os.environ.items() if k.startswith("CUDA_MPS_") or k == "CUDA_VISIBLE_DEVICES"}
        conn.send(("hello", {"pid": os.getpid(), "env": mps_env, "at": time.perf_counter()}))

    def serve(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except EOFError:
                return
            if message[0] == "warmup":
                self.warmup(int(message[1]))
            elif message[0] == "go":
                self.timed_window()
                self.idle()
            elif message[0] == "exit":
                return

    def warmup(self, iterations: int) -> None:
        torch = self.torch
        start = time.perf_counter()
        self.ranges.push("warmup")
        for _ in range(iterations):
            self.step()
        if self.on_cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            self.step()  # re-grow the cache to its steady-state size outside the window
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self.ranges.pop()
        device_name = torch.cuda.get_device_name(self.device) if self.on_cuda else "cpu"
        end = time.perf_counter()
        self.conn.send(("ready", {"warmup_s": end - start, "warmup_span": (start, end), "device_name": device_name,
                                  "pid": os.getpid()}))

    def _ended_after(self, ends: list[float], resolve: Callable[[bool], None], stop_at: float) -> bool:
        """Whether this job's last iteration ended at or after ``stop_at``, so that it may stop.

        The window ends at the earliest last iteration end over the group, and the coordinator stops when every
        job has enough iterations ending inside it. A job that ended an iteration, then lost the CPU before it
        read the stop, would end the window before its partners' counted iterations (one job 3 iterations of the
        4 asked, seen on a loaded 2-core machine): it runs one more iteration instead. On CUDA the queue is
        drained first (the timed iterations are all enqueued; draining only delays the extra one, if any).
        """
        if self.on_cuda:
            self.torch.cuda.synchronize(self.device)
            resolve(True)
        return bool(ends) and ends[-1] >= stop_at

    def idle(self) -> None:
        if self.on_cuda:
            self.torch.cuda.empty_cache()

    def memory(self) -> dict[str, float]:
        torch = self.torch
        if self.on_cuda:
            return {"peak_allocated_mib": torch.cuda.max_memory_allocated(self.device) / 2**20,
                    "peak_reserved_mib": torch.cuda.max_memory_reserved(self.device) / 2**20}
        rss = max(_rss_mib() - self.rss_before, 0.0)
        return {"peak_allocated_mib": rss, "peak_reserved_mib": rss}

    def timed_window(self) -> None:
        torch, conn = self.torch, self.conn
        ends: list[float] = []
        pending: deque[Any] = deque()
        anchor: Any = None
        reserved_at_start = math.nan
        if self.on_cuda:
            torch.cuda.synchronize(self.device)
            reserved_at_start = torch.cuda.memory_reserved(self.device) / 2**20  # vs the window's peak: no regrowth
            anchor = torch.cuda.Event(enable_timing=True)
            anchor.record()
        start = time.perf_counter()
        conn.send(("started", start))

        def resolve(block: bool) -> None:
            while pending and (block or pending[0].query()):
                event = pending.popleft()
                if block:
                    event.synchronize()
                ends.append(start + anchor.elapsed_time(event) / 1000.0)

        window_start: float | None = None
        last_report = start
        stop_at: float | None = None  # the coordinator's clock when it sent the stop
        self.ranges.push("window")
        while True:
            if self.on_cuda and len(pending) >= MAX_IN_FLIGHT:
                pending[0].synchronize()  # bound the CPU's run-ahead: wait for the oldest queued iteration
            self.ranges.push("iteration")
            self.step()
            if self.on_cuda:
                event = torch.cuda.Event(enable_timing=True)
                event.record()
                pending.append(event)
                resolve(block=False)
            else:
                ends.append(time.perf_counter())
            self.ranges.pop()
            while conn.poll():
                message = conn.recv()
                if message[0] == "window":
                    window_start = message[1]
                elif message[0] == "stop":
                    stop_at = float(message[1])
            if stop_at is not None and self._ended_after(ends, resolve, stop_at):
                break
            now = time.perf_counter()
            if window_start is not None and now - last_report >= PROGRESS_INTERVAL_S:
                # ends grow in time order (host clock, or CUDA events resolved in stream order): no full scan
                conn.send(("progress", len(ends) - bisect.bisect_left(ends, window_start)))
                last_report = now
            if os.getppid() != self.parent:  # the coordinator is gone (belt and braces beside PDEATHSIG)
                raise SystemExit(0)
        self.ranges.pop()
        conn.send(("result", {"ends": ends, "start": start, "reserved_at_start_mib": reserved_at_start,
                              **self.memory()}))
