"""kernels.parquet in a results directory: read, merge new job types in, write atomically (+ CSV copy)."""

from __future__ import annotations

import platform
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from colocate.analysis.results import empty_kernels
from common.files import atomic_write_json
from common.files import atomic_write_table as atomic_write_parquet
from profiler.results.schema import KERNEL_COLUMNS, KERNELS_FILE
from profiler.results.store import ResultsStore

KERNELS_META_FILE = "kernels_meta.json"
OCCUPANCY_NOTE = ("torch-profiler occupancy_pct is the CUDA occupancy-calculator estimate from the launch "
                  "configuration ('est. achieved occupancy %'): identical alone or co-located. ncu rows carry "
                  "achieved occupancy (sm__warps_active), DRAM and SM throughput, measured with the job alone. "
                  "On CPU the rows are PyTorch CPU operators with their self time; GPU-only columns are empty.")


def read_kernels(out: str | Path) -> pd.DataFrame:
    """The kernel rows already in ``out`` (empty table when there are none)."""
    path = Path(out) / KERNELS_FILE
    if not path.is_file():
        return empty_kernels()
    return ResultsStore(out, readonly=True).table(KERNELS_FILE)


def write_kernels(out: str | Path, existing: pd.DataFrame, new: Sequence[pd.DataFrame], *, replace_backend: str) -> pd.DataFrame:
    """Existing rows minus the (job type, image size, GPU type, backend) groups in ``new``, plus ``new``."""
    frames = [f for f in new if not f.empty]
    if not frames:
        return existing
    added = pd.concat(frames, ignore_index=True)
    keys = ["job_type", "image_size", "gpu_type", "backend"]
    if not existing.empty:
        replaced = existing[keys].astype(str).agg("|".join, axis=1).isin(
            set(added[keys].astype(str).agg("|".join, axis=1)))
        existing = existing[~replaced]
    table = pd.concat([existing, added], ignore_index=True)[list(KERNEL_COLUMNS)] if not existing.empty else added
    atomic_write_parquet(table, Path(out) / KERNELS_FILE)
    return table


def kernel_meta(out: str | Path, **extra: Any) -> None:
    """kernels_meta.json: what produced the kernel table (the campaign's own meta.json is left alone)."""
    import torch

    meta = {"written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "occupancy_note": OCCUPANCY_NOTE,
            "torch": torch.__version__, "cuda": torch.version.cuda, "host": platform.node(), **extra}
    atomic_write_json(meta, Path(out) / KERNELS_META_FILE)


def check_kernel_backend(backend: str, spec: Any, spec_path: str | Path) -> str:
    """The backend's label in kernels.parquet; one-line errors for a backend this spec or machine cannot use."""
    from common.errors import InputError
    from profiler.gpu.ncu import find_ncu
    from profiler.kernels import BACKEND_NCU, BACKEND_TORCH, BACKENDS

    if backend not in BACKENDS:
        raise InputError(f"unknown backend '{backend}'", field="--backend", valid=", ".join(BACKENDS))
    if backend == "ncu":
        if not spec.is_cuda:
            raise InputError("the ncu backend profiles CUDA kernels", source=spec_path, field="device",
                             valid="cuda or cuda:N (or use --backend torch)")
        if find_ncu() is None:
            raise InputError("Nsight Compute (ncu) is not on PATH", field="--backend",
                             valid="torch, or install Nsight Compute for --backend ncu")
    return BACKEND_NCU if backend == "ncu" else BACKEND_TORCH


def profile_spec_kernels(
    spec: Any, spec_path: str | Path, out: str | Path, *, backend: str = "torch", iters: int = 2, force: bool = False,
    on_start: Callable[[int], None] | None = None, on_job: Callable[[str, int | None, str | None], None] | None = None,
) -> pd.DataFrame:
    """Profile every model × batch size of ``spec`` alone and merge the rows into ``out/kernels.parquet``.

    Job types already profiled with this backend and image size are skipped unless ``force``. The table is
    written after each job type, so an interrupted profile keeps what it measured. ``on_start(todo)`` gets
    the number of job types to profile; ``on_job(job_type, rows, error)`` is called after each (``rows`` is
    None when it failed: out of memory or an ncu failure, reported and skipped). Returns the whole table.
    """
    from common.errors import InputError
    from profiler.campaign.outdir import prepare_out_dir
    from profiler.kernels import profile_kernels

    label = check_kernel_backend(backend, spec, spec_path)
    prepare_out_dir(out)  # a file, a path under a file or an unwritable --out: one line before any work
    existing = read_kernels(out)
    done: set[str] = set()
    if not existing.empty and not force:
        same = existing[(existing["backend"] == label) & (existing["image_size"] == spec.image_size)]
        done = set(same["job_type"])
    todo = [(m, b) for m in spec.models for b in spec.batch_sizes if f"{m}@{b}" not in done]
    if on_start:
        on_start(len(todo))
    frames: list[pd.DataFrame] = []
    table = existing
    for model, batch in todo:
        try:
            frame = profile_kernels(model, batch, spec.image_size, spec.device, warmup_iters=spec.warmup_iters,
                                    num_classes=spec.num_classes, seed=spec.seed, iters=iters, backend=backend,
                                    threads=spec.threads_per_job if not spec.is_cuda else None)
        except ValueError as exc:  # unknown model or size: the spec is wrong
            raise InputError(str(exc), source=spec_path, field="models") from None
        except RuntimeError as exc:  # OOM or ncu failure: record nothing for this job type, go on
            if on_job:
                on_job(f"{model}@{batch}", None, str(exc))
            continue
        frames.append(frame)
        table = write_kernels(out, existing, frames, replace_backend=label)
        if on_job:
            on_job(f"{model}@{batch}", len(frame), None)
    kernel_meta(out, spec=spec.to_dict(), backend=label, iters=iters)
    return table
