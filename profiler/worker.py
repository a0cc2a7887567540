"""One training job in its own OS process: build, warm up, wait at the barrier, run timed iterations.

Protocol with the coordinator (``profiler.runner``), over a duplex ``multiprocessing`` pipe:

====================  =========================================================================
worker → coordinator  ``("ready", info)`` after warm-up; ``("started", t0)`` when timing begins;
                      ``("progress", n)`` iterations ended inside the window so far (~10 Hz);
                      ``("result", payload)`` after stop; ``("error", kind, message)`` on failure
coordinator → worker  ``("go",)`` = start barrier; ``("window", t)`` = common window start;
                      ``("stop",)``
====================  =========================================================================

Timestamps are ``time.perf_counter()`` values, which on Linux read CLOCK_MONOTONIC and are therefore
comparable across processes of one host. On CUDA each iteration's end is a CUDA event (no per-iteration
synchronize: that would change what is measured); events are converted to host time through one anchor
taken after a synchronize at the start of the window and resolved with non-blocking ``query()``.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import resource
import signal
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from profiler.signals import die_with_parent

PROGRESS_INTERVAL_S = 0.1


@dataclass(frozen=True)
class JobConfig:
    model: str
    batch_size: int
    image_size: int
    num_classes: int
    device: str  # "cpu" or "cuda:0" (the coordinator narrows CUDA_VISIBLE_DEVICES to one GPU)
    seed: int
    warmup_iters: int
    threads: int
    env: dict[str, str] = field(default_factory=dict)  # applied before torch touches CUDA (MPS pipes, %)
    nvtx: bool = True


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


class _Ranges:
    """NVTX ranges (no-ops when no profiler is attached) so Nsight captures can be cut to the window."""

    def __init__(self, enabled: bool) -> None:
        self._nvtx: Any = None
        if enabled:
            with contextlib.suppress(Exception):
                import nvtx

                self._nvtx = nvtx

    def push(self, name: str) -> None:
        if self._nvtx is not None:
            self._nvtx.push_range(name, domain="colocate")

    def pop(self) -> None:
        if self._nvtx is not None:
            self._nvtx.pop_range(domain="colocate")


def job_main(conn: Connection, config: JobConfig) -> None:
    """Process entry point (spawned). Never raises: every failure becomes an ``("error", ...)`` message."""
    die_with_parent()  # a killed campaign leaves no orphans
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the coordinator stops us
    parent = os.getppid()
    os.environ.update(config.env)
    try:
        _run(conn, config, parent)
    except Exception as exc:  # reported, then the process exits non-zero
        kind = "crash"
        with contextlib.suppress(Exception):
            import torch

            if isinstance(exc, torch.OutOfMemoryError):
                kind = "oom"
        message = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
        with contextlib.suppress(Exception):
            conn.send(("error", kind, message, traceback.format_exc(limit=4)))
        sys.exit(1)
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def _run(conn: Connection, config: JobConfig, parent: int) -> None:
    import torch

    from profiler.training import make_training_step

    torch.set_num_threads(config.threads)
    device = torch.device(config.device)
    on_cuda = device.type == "cuda"
    ranges = _Ranges(config.nvtx)
    rss_before = _rss_mib()
    step = make_training_step(config.model, config.batch_size, image_size=config.image_size,
                              num_classes=config.num_classes, device=device, seed=config.seed)

    warmup_start = time.perf_counter()
    ranges.push("warmup")
    for _ in range(config.warmup_iters):
        step()
    if on_cuda:
        torch.cuda.synchronize(device)
    ranges.pop()
    warmup_s = time.perf_counter() - warmup_start
    if on_cuda:
        peak_mib = torch.cuda.max_memory_reserved(device) / 2**20
        device_name = torch.cuda.get_device_name(device)
    else:
        peak_mib = max(_rss_mib() - rss_before, 0.0)
        device_name = "cpu"
    conn.send(("ready", {"peak_memory_mib": peak_mib, "warmup_s": warmup_s, "device_name": device_name,
                         "pid": os.getpid()}))

    message = conn.recv()  # the start barrier: every job is warm before any job is timed
    if message[0] == "stop":
        conn.send(("result", {"ends": [], "start": None, "peak_memory_mib": peak_mib}))
        return

    ends: list[float] = []
    pending: deque[Any] = deque()
    if on_cuda:
        torch.cuda.synchronize(device)
        anchor_event = torch.cuda.Event(enable_timing=True)
        anchor_event.record()
    start = time.perf_counter()
    conn.send(("started", start))

    def resolve(block: bool) -> None:
        while pending and (block or pending[0].query()):
            event = pending.popleft()
            if block:
                event.synchronize()
            ends.append(start + anchor_event.elapsed_time(event) / 1000.0)

    window_start: float | None = None
    last_report = start
    stopping = False
    ranges.push("window")
    while not stopping:
        ranges.push("iteration")
        step()
        if on_cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            pending.append(event)
            resolve(block=False)
        else:
            ends.append(time.perf_counter())
        ranges.pop()
        while conn.poll():
            message = conn.recv()
            if message[0] == "window":
                window_start = message[1]
            elif message[0] == "stop":
                stopping = True
        now = time.perf_counter()
        if window_start is not None and now - last_report >= PROGRESS_INTERVAL_S:
            # ends grow in time order (host clock, or CUDA events resolved in stream order): no full scan
            conn.send(("progress", len(ends) - bisect.bisect_left(ends, window_start)))
            last_report = now
        if os.getppid() != parent:  # the coordinator is gone (belt and braces beside PDEATHSIG)
            return
    if on_cuda:
        torch.cuda.synchronize(device)
        resolve(block=True)
        peak_mib = max(peak_mib, torch.cuda.max_memory_reserved(device) / 2**20)
    ranges.pop()
    conn.send(("result", {"ends": ends, "start": start, "peak_memory_mib": peak_mib}))
