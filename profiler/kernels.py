"""Kernel-level profiles of one training job running alone (thesis Figs. 4.6–4.9; README, "Kernel profiles").

:func:`profile_kernels` trains a model for a warm-up, then records ``iters`` (default 2) training iterations
with the PyTorch profiler (Kineto), exports the Chrome trace and turns it into one row per kernel launch
(:data:`profiler.results.schema.KERNEL_COLUMNS`):

* **CUDA**: trace events with ``cat == "kernel"`` — name, duration, grid, block, registers per thread, shared
  memory, blocks and warps per SM and ``"est. achieved occupancy %"`` (older builds: ``"theoretical
  occupancy %"``). That occupancy is the CUDA occupancy-calculator *estimate* from the launch
  configuration: identical alone or co-located, and not what the kernel achieved. ``backend="ncu"``
  (:mod:`profiler.gpu.ncu`) measures achieved occupancy and DRAM/SM throughput instead.
* **CPU**: there are no CUDA kernels. What a user profiling on a CPU wants to see is where the time goes,
  so the rows are the CPU operators of the iterations (``aten::mkldnn_convolution``, ``aten::addmm`` …)
  with their *self* time as duration (nested operators subtracted, so durations add up without double
  counting) and every GPU-only column empty.

``python -m profiler.kernels --worker ...`` is the job the ncu backend launches under Nsight Compute.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
from collections.abc import Iterable
from typing import Any

import pandas as pd

from profiler.measure.training import make_training_step
from profiler.results.schema import KERNEL_COLUMNS

BACKEND_TORCH = "torch-profiler"
BACKEND_NCU = "ncu"
BACKENDS = ("torch", "ncu")
OCCUPANCY_KEYS = ("est. achieved occupancy %", "theoretical occupancy %")
NUMERIC_COLUMNS = ("batch_size", "image_size", "duration_us", "registers_per_thread", "shared_memory_bytes",
                   "blocks_per_sm", "warps_per_sm", "occupancy_pct", "dram_throughput_pct", "sm_throughput_pct")


def _dims(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(int(v)) for v in value)
    return "" if value is None else str(value)


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def kernel_rows_from_trace(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """CUDA kernel launches of a Chrome trace (events with ``cat == "kernel"``) as KERNEL_COLUMNS fields."""
    rows = []
    for event in trace.get("traceEvents", []):
        if event.get("cat") != "kernel" or event.get("ph") != "X":
            continue
        args = event.get("args", {}) or {}
        occupancy = next((args[key] for key in OCCUPANCY_KEYS if key in args), None)
        rows.append({
            "kernel": str(event.get("name", "")),
            "duration_us": _float(event.get("dur")),
            "grid": _dims(args.get("grid")),
            "block": _dims(args.get("block")),
            "registers_per_thread": _float(args.get("registers per thread")),
            "shared_memory_bytes": _float(args.get("shared memory")),
            "blocks_per_sm": _float(args.get("blocks per SM")),
            "warps_per_sm": _float(args.get("warps per SM")),
            "occupancy_pct": _float(occupancy),
        })
    return rows


def cpu_ops_self_time(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """CPU operator events (``cat == "cpu_op"``) with their *self* time: duration minus nested operators'.

    Operators nest (``aten::conv2d`` → ``aten::convolution`` → … → ``aten::mkldnn_convolution`` →
    ``aten::empty``); summing whole durations would count the same time several times, and keeping only
    innermost operators would hide the convolution behind the allocation it calls. Self time is what each
    operator spent in its own code, so the rows of one iteration add up to its operator time. Returns
    ``{"name", "ts", "self_us"}`` per operator with positive self time, in start order.
    """
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X" and e.get("dur") is not None]
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for event in ops:
        by_thread.setdefault((event.get("pid"), event.get("tid")), []).append(event)
    result: list[dict[str, Any]] = []
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        self_time = [float(e["dur"]) for e in thread_events]
        stack: list[int] = []
        for index, event in enumerate(thread_events):
            start = float(event["ts"])
            while stack and float(thread_events[stack[-1]]["ts"]) + float(thread_events[stack[-1]]["dur"]) <= start:
                stack.pop()
            if stack:  # a direct child: its time is not the parent's own
                self_time[stack[-1]] -= float(event["dur"])
            stack.append(index)
        result.extend({"name": str(e.get("name", "")), "ts": float(e["ts"]), "self_us": max(t, 0.0)}
                      for e, t in zip(thread_events, self_time) if t > 0)
    result.sort(key=lambda r: r["ts"])
    return result


def cpu_rows_from_trace(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """CPU operators of a Chrome trace as KERNEL_COLUMNS fields: duration = self time, GPU-only columns empty."""
    return [{"kernel": op["name"], "duration_us": op["self_us"]}
            for op in cpu_ops_self_time(trace.get("traceEvents", []))]


def kernel_frame(rows: list[dict[str, Any]], **constants: Any) -> pd.DataFrame:
    """Rows + per-job constants (model, batch size …) → a DataFrame with exactly KERNEL_COLUMNS."""
    frame = pd.DataFrame([{**constants, **row} for row in rows], columns=list(KERNEL_COLUMNS))
    for column in NUMERIC_COLUMNS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    for column in KERNEL_COLUMNS:
        if column not in NUMERIC_COLUMNS:
            frame[column] = frame[column].astype("object")
    return frame


def _device_identity(device: str) -> tuple[str, str]:
    from profiler.gpu.devices import cpu_name, gpu_type_from_name

    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name(torch.device(device))
        return name, gpu_type_from_name(name)
    return cpu_name(), "cpu"


def profile_kernels(
    model: str,
    batch_size: int,
    image_size: int,
    device: str = "cpu",
    *,
    warmup_iters: int = 5,
    num_classes: int = 10,
    seed: int = 0,
    iters: int = 2,
    backend: str = "torch",
    threads: int | None = None,
) -> pd.DataFrame:
    """Profile ``iters`` training iterations of one job alone after ``warmup_iters``; one row per kernel.

    ``backend="torch"`` (default) uses the PyTorch profiler in this process; ``backend="ncu"`` runs the job
    in a subprocess under Nsight Compute (CUDA only). See the module docstring for what rows mean on CPU.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown kernel backend '{backend}' (valid: {', '.join(BACKENDS)})")
    gpu_name, gpu_type = _device_identity(device)
    constants = {"model": model, "batch_size": batch_size, "job_type": f"{model}@{batch_size}",
                 "image_size": image_size, "gpu_name": gpu_name, "gpu_type": gpu_type}
    if backend == "ncu":
        if not device.startswith("cuda"):
            raise ValueError("the ncu backend profiles CUDA kernels: it needs device cuda or cuda:N")
        from profiler.gpu.ncu import run_ncu

        args = ["--model", model, "--batch-size", str(batch_size), "--image-size", str(image_size),
                "--device", device, "--warmup-iters", str(warmup_iters), "--iters", str(iters),
                "--num-classes", str(num_classes), "--seed", str(seed)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}  # never under MPS
        return kernel_frame(run_ncu(args, env=env), backend=BACKEND_NCU, **constants)

    import torch
    from torch.profiler import ProfilerActivity, profile

    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        step = make_training_step(model, batch_size, image_size=image_size, num_classes=num_classes, device=device,
                                  seed=seed)  # the step the profiler's workers time
        on_cuda = device.startswith("cuda")
        for _ in range(warmup_iters):
            step()
        if on_cuda:
            torch.cuda.synchronize(torch.device(device))
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
        with profile(activities=activities) as prof:
            for _ in range(iters):
                step()
            if on_cuda:
                torch.cuda.synchronize(torch.device(device))
        with tempfile.TemporaryDirectory(prefix="colocate-kernels-") as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as handle:
                trace = json.load(handle)
    finally:
        torch.set_num_threads(previous_threads)
    rows = kernel_rows_from_trace(trace) if on_cuda else cpu_rows_from_trace(trace)
    return kernel_frame(rows, backend=BACKEND_TORCH, **constants)


def _worker(argv: list[str] | None = None) -> None:
    """The job ncu profiles: warm up, then ``iters`` iterations between cudaProfilerStart/Stop."""
    parser = argparse.ArgumentParser(prog="python -m profiler.kernels --worker")
    parser.add_argument("--worker", action="store_true", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--image-size", type=int, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup-iters", type=int, default=5)
    parser.add_argument("--iters", type=int, default=2)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import torch  # NVTX through torch.cuda.nvtx: the job needs no extra package

    step = make_training_step(args.model, args.batch_size, image_size=args.image_size, num_classes=args.num_classes,
                              device=args.device, seed=args.seed)
    for _ in range(args.warmup_iters):
        step()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    torch.cuda.nvtx.range_push("colocate-kernels-window")
    for _ in range(args.iters):
        step()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    torch.cuda.profiler.stop()


if __name__ == "__main__":  # pragma: no cover - exercised under ncu on GPU machines
    _worker()
