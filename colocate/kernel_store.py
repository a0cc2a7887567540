"""kernels.parquet in a results directory: read, merge new job types in, write atomically (+ CSV copy)."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from colocate.results import KERNELS_FILE, _read_parquet, atomic_write_json, atomic_write_parquet, empty_kernels
from profiler.schema import KERNEL_COLUMNS

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
    return _read_parquet(path, KERNEL_COLUMNS, ("job_type", "kernel", "duration_us"))


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
