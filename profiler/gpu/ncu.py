"""Nsight Compute (``ncu``) backend for kernel profiles: true achieved occupancy and memory utilization.

The torch profiler only knows the occupancy-calculator *estimate* per launch. Nsight Compute replays each
kernel with hardware counters, so it measures what the kernel achieved (README, "Kernel profiles"):

* ``sm__warps_active.avg.pct_of_peak_sustained_active`` — achieved occupancy (%);
* ``dram__throughput.avg.pct_of_peak_sustained_elapsed`` — memory (DRAM) utilization (%);
* ``sm__throughput.avg.pct_of_peak_sustained_elapsed`` — SM utilization (%);
* ``gpu__time_duration.sum`` — kernel duration; plus launch geometry, registers and shared memory.

ncu serialises kernels and cannot profile MPS clients, so it always runs a job *alone* and never under MPS.
The profiled job (``python -m profiler.kernels --worker ...``) brackets two iterations after warm-up with
``cudaProfilerStart/Stop`` and ncu runs with ``--profile-from-start off``, so only those kernels are
captured; ``--clock-control none`` keeps the GPU's own clocks (what training sees). The report is written
with ``--export`` and read back with ``--import ... --csv --page raw`` (stdout of the job never mixes in).
"""

from __future__ import annotations

import csv
import io
import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common.errors import InputError

ACHIEVED_OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
DRAM_THROUGHPUT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
DURATION = "gpu__time_duration.sum"
WARPS_PER_SM = "sm__warps_active.avg.per_cycle_active"
REGISTERS = "launch__registers_per_thread"
SHARED_STATIC = "launch__shared_mem_per_block_static"
SHARED_DYNAMIC = "launch__shared_mem_per_block_dynamic"
BLOCK_LIMITS = ("launch__occupancy_limit_blocks", "launch__occupancy_limit_registers",
                "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps")
METRICS: tuple[str, ...] = (ACHIEVED_OCCUPANCY, DRAM_THROUGHPUT, SM_THROUGHPUT, DURATION, WARPS_PER_SM, REGISTERS,
                            SHARED_STATIC, SHARED_DYNAMIC, *BLOCK_LIMITS)

_TIME_UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
               "second": 1e6, "s": 1e6}
_BYTE_UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "KiB": 1024,
               "MiB": 1024**2}


def find_ncu() -> str | None:
    """Path of the ``ncu`` executable, or None when Nsight Compute is not installed."""
    return shutil.which("ncu")


def _number(text: str) -> float:
    """A value from ncu's CSV ('1,234.5' has thousands separators); 'n/a' and '' become NaN."""
    cleaned = text.strip().replace(",", "")
    try:
        return float(cleaned)
    except ValueError:
        return math.nan


def _scaled(value: float, unit: str, table: dict[str, float]) -> float:
    base = unit.split("/")[0].strip()  # "Kbyte/block" → "Kbyte"
    return value * table.get(base, 1.0)


def _dims(text: str) -> str:
    """'(256, 1, 1)' → '256,1,1' (the same spelling as the torch-profiler rows)."""
    numbers = re.findall(r"\d+", text or "")
    return ",".join(numbers)


def parse_ncu_csv(text: str) -> list[dict[str, Any]]:
    """Parse ``ncu --csv --page raw`` output into one dict per kernel launch (keys = KERNEL_COLUMNS subset).

    The raw page has a header row of column names (identity columns such as "Kernel Name", "Block Size",
    "Grid Size" first, then one column per metric), an optional units row (identity cells empty), then one
    row per profiled kernel. Lines before the header (``==PROF==`` messages, program output) are skipped.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"') or line.startswith("ID,")), None)
    if start is None:
        raise InputError("no CSV header found in ncu output", field="ncu --csv --page raw",
                         valid='a raw-page CSV whose header starts with "ID"')
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = next(reader)
    rows = [row for row in reader if row and any(cell.strip() for cell in row)]
    units: dict[str, str] = {}
    if rows and not rows[0][0].strip():  # units row: no ID
        units = dict(zip(header, rows[0]))
        rows = rows[1:]
    column = {name: i for i, name in enumerate(header)}
    missing = [name for name in ("Kernel Name",) if name not in column]
    if missing:
        raise InputError(f"ncu CSV has no '{missing[0]}' column", field=missing[0], valid="ncu --csv --page raw output")

    def cell(row: list[str], name: str) -> str:
        index = column.get(name)
        return row[index] if index is not None and index < len(row) else ""

    records = []
    for row in rows:
        if len(row) < len(header) // 2:
            continue  # a truncated line (ncu killed mid-write)
        duration = _number(cell(row, DURATION))
        shared = [_scaled(_number(cell(row, name)), units.get(name, "byte"), _BYTE_UNITS)
                  for name in (SHARED_STATIC, SHARED_DYNAMIC)]
        limits = [_number(cell(row, name)) for name in BLOCK_LIMITS if name in column]
        limits = [x for x in limits if not math.isnan(x)]
        records.append({
            "kernel": cell(row, "Kernel Name"),
            "duration_us": _scaled(duration, units.get(DURATION, "nsecond"), _TIME_UNITS),
            "grid": _dims(cell(row, "Grid Size")),
            "block": _dims(cell(row, "Block Size")),
            "registers_per_thread": _number(cell(row, REGISTERS)),
            "shared_memory_bytes": math.fsum(x for x in shared if not math.isnan(x))
            if any(not math.isnan(x) for x in shared) else math.nan,
            "blocks_per_sm": min(limits) if limits else math.nan,
            "warps_per_sm": _number(cell(row, WARPS_PER_SM)),
            "occupancy_pct": _number(cell(row, ACHIEVED_OCCUPANCY)),
            "dram_throughput_pct": _number(cell(row, DRAM_THROUGHPUT)),
            "sm_throughput_pct": _number(cell(row, SM_THROUGHPUT)),
        })
    return records


def ncu_commands(
    ncu: str, report: Path, worker_args: list[str], *, python: str | None = None,
) -> tuple[list[str], list[str]]:
    """The two ncu command lines: collect (``--export report``) and read back as raw CSV."""
    collect = [ncu, "--target-processes", "all", "--profile-from-start", "off", "--clock-control", "none",
               "--metrics", ",".join(METRICS), "--export", str(report), "--force-overwrite",
               python or sys.executable, "-m", "profiler.kernels", "--worker", *worker_args]
    read = [ncu, "--import", f"{report}.ncu-rep" if not str(report).endswith(".ncu-rep") else str(report),
            "--csv", "--page", "raw"]
    return collect, read


def run_ncu(worker_args: list[str], *, timeout_s: float = 1800.0, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Profile one job under ncu and return its kernel records. Raises RuntimeError when ncu fails."""
    ncu = find_ncu()
    if ncu is None:
        raise InputError("Nsight Compute (ncu) is not on PATH", field="backend",
                         valid="torch (default), or install Nsight Compute for --backend ncu")
    with tempfile.TemporaryDirectory(prefix="colocate-ncu-") as tmp:
        report = Path(tmp) / "kernels"
        collect, read = ncu_commands(ncu, report, worker_args)
        done = subprocess.run(collect, capture_output=True, text=True, timeout=timeout_s, env=env)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"ncu failed (exit {done.returncode}): {' | '.join(tail)}")
        exported = subprocess.run(read, capture_output=True, text=True, timeout=600)
        if exported.returncode != 0:
            raise RuntimeError(f"ncu --import failed (exit {exported.returncode}): {exported.stderr.strip()[-300:]}")
        return parse_ncu_csv(exported.stdout)
