"""Solo iteration times and peak memory of the zoo's models, as this project measured them on a GPU.

``scheduler/data/solo-<gpu>.csv`` (today ``h100``: the ok solo runs of ``results/h100/first-call`` and
``results/h100/thesis-grid``, TF32 at 224 px, median per model and batch)::

    gpu_type,model,batch_size,image_size,precision,iter_time_s,peak_memory_mib,peak_allocated_mib,runs

``peak_memory_mib`` is the caching allocator's reserved peak (``torch.cuda.max_memory_reserved``), what a member's
allocator cap in ``colocate serve`` limits (:mod:`scheduler.service.contract`); ``iter_time_s`` is what
``scripts/live-gpu.sh --dry-run`` sizes its jobs and estimates its GPU time from. ``python -m
scheduler.formats.bundled`` rebuilds the files (:func:`build_solo_times`); :func:`solo_table` reads one with the
standard library only (the server reads it; nothing here imports pandas unless building).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from scheduler.formats.bundled_files import DATA_DIR, MEASURED_GPU_TYPES

COLUMNS = ("gpu_type", "model", "batch_size", "image_size", "precision", "iter_time_s", "peak_memory_mib",
           "peak_allocated_mib", "runs")
SOURCES = ("first-call", "thesis-grid")  # the results directories of results/<gpu>/ with solo runs


@dataclass(frozen=True)
class SoloRun:
    """One model at one batch, alone on the GPU: median iteration time and peak memory."""

    model: str
    batch_size: int
    image_size: int
    precision: str
    iter_time_s: float
    peak_memory_mib: float
    runs: int


def solo_file(gpu_type: str) -> Path:
    return DATA_DIR / f"solo-{gpu_type}.csv"


@lru_cache(maxsize=8)
def solo_table(gpu_type: str) -> Mapping[tuple[str, int], SoloRun]:
    """``(model, batch) -> SoloRun`` of the bundled solos on ``gpu_type`` (empty when none are bundled)."""
    path = solo_file(gpu_type)
    if gpu_type not in MEASURED_GPU_TYPES or not path.is_file():
        return {}
    out: dict[tuple[str, int], SoloRun] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(line for line in fh if not line.startswith("#")):
            run = SoloRun(row["model"], int(row["batch_size"]), int(row["image_size"]), row["precision"],
                          float(row["iter_time_s"]), float(row["peak_memory_mib"]), int(row["runs"]))
            out[(run.model, run.batch_size)] = run
    return out


def build_solo_times(results: Path, out: Path = DATA_DIR) -> list[Path]:
    """Write ``solo-<gpu>.csv`` from the ok solo runs under ``results/<gpu>/`` (:data:`SOURCES`)."""
    import pandas as pd

    from profiler.results.schema import JOBS_FILE
    from profiler.results.store import read_results_dir

    written = []
    for gpu in MEASURED_GPU_TYPES:
        frames = []
        for name in SOURCES:
            folder = results / gpu / name
            if not (folder / JOBS_FILE).is_file():
                continue
            found = read_results_dir(folder)
            solo = found.jobs.merge(found.runs[["run_id", "kind", "image_size", "gpu_type"]], on="run_id")
            frames.append(solo[(solo["kind"] == "solo") & (solo["status"] == "ok")])
        if not frames:
            continue
        solos = pd.concat(frames, ignore_index=True)
        table = (solos.groupby(["gpu_type", "model", "batch_size", "image_size", "precision"])
                 .agg(iter_time_s=("iter_time_s", "median"), peak_memory_mib=("peak_memory_mib", "median"),
                      peak_allocated_mib=("peak_allocated_mib", "median"), runs=("iter_time_s", "size"))
                 .reset_index())
        table["image_size"] = table["image_size"].astype(int)
        table = table.round({"iter_time_s": 6, "peak_memory_mib": 1, "peak_allocated_mib": 1})
        dst = out / solo_file(gpu).name
        note = (f"# Solo runs measured by this project on one {gpu.upper()} (results/{gpu}/{{{','.join(SOURCES)}}}, "
                f"ok solos; results/{gpu}/REPORT.md: GPU, driver, torch): median per model and batch.\n"
                "# peak_memory_mib: torch.cuda.max_memory_reserved; regenerate: python -m scheduler.formats.bundled\n")
        dst.write_text(note + table[list(COLUMNS)].to_csv(index=False))
        written.append(dst)
    solo_table.cache_clear()
    return written


__all__ = ["COLUMNS", "SoloRun", "build_solo_times", "solo_file", "solo_table"]
