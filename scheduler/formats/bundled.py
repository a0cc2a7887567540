"""The default data shipped in the package (``scheduler/data/``), and how it was derived.

A clean clone has no ``../shared/data``; everything here comes from permissively licensed public sources,
with attribution in each file's header (CSV ``#`` lines; the JSON file has a sidecar ``SOURCE.md``):

* ``profiles/<app>/placements-t4.csv``, ``scalability-t4.csv``, ``validation-<bsz>.csv`` — Pollux's
  measured T4 throughput profiles and gradient-statistics curves (petuum/adaptdl, ``osdi21-artifact``,
  ``simulator/traces/<app>/``, Apache-2.0), byte for byte below the header.
* ``profiles/<app>/placements-v100.csv`` — a *derived* V100 type: Pollux's 1-GPU T4 rows with the step time
  divided by the V100/P100 single-GPU throughput ratio that Gavel measured for the matching model (T4 ≈ P100
  in FP32 throughput, 8.1 vs 9.3 TFLOPS, both 16 GB). Only 1-GPU rows are written: multi-GPU V100 throughput
  is bootstrapped at run time exactly as Sia bootstraps an unprofiled GPU type,
  ``tput_v100(N) = tput_v100(1) / tput_t4(1) · tput_t4(N)`` (:class:`scheduler.model.goodput.ProfileGoodputModel`).
* ``gavel_throughputs_sf1.json`` — Gavel's measured solo and pair throughputs (stanford-futuredata/gavel,
  ``scheduler/simulation_throughputs.json``, MIT), scale factor 1 on K80/P100/V100 only.
* ``colocation-default.csv`` — pair ratios for the bundled types transferred from those Gavel pairs
  (:mod:`scheduler.formats.transfer`; t4 ← P100, v100 ← V100).
* ``colocation-<gpu>-<sharing>.csv`` — pair ratios this project measured on a GPU (today ``h100``, under ``mps``
  and ``timeslice``), from ``results/<gpu>/matrices/colocation-<sharing>.csv`` (:func:`build_measured`).
  ``colocate serve`` starts from the file of its ``--sharing`` mode on a cluster with that GPU type
  (:func:`measured_table`); the simulator's default table holds the ``mps`` rows.
* ``solo-<gpu>.csv`` — solo iteration times and peak memory of the zoo's models measured on that GPU
  (:mod:`scheduler.formats.solo_times`): ``colocate serve``'s memory estimates and ``scripts/live-gpu.sh``'s.
* ``cluster-default.yaml`` — a 32-GPU two-type cluster over which ``colocate demo`` simulates.

Licences and the derivation in full: ``scheduler/data/SOURCE.md``.

Sia's own files (A100, RTX 2080Ti, ... profiles; workloads) carry no licence and are never copied: they are
read at run time from ``$COLOCATE_SHARED_DATA/sia`` when present. ``python -m scheduler.formats.bundled [SHARED]``
regenerates this folder from the public data folder (``../shared/data``).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from scheduler.formats.bundled_files import (
    CLUSTER_FILE,
    COLOCATION_FILE,
    DATA_DIR,
    DERIVED_TYPES,
    GAVEL_FILE,
    GPU_MAP,
    MEASURED_GPU_TYPES,
    MEASURED_TYPE,
    PROFILES_DIR,
    REFERENCE_GAVEL_TYPE,
    SHARING_MODES,
    measured_table_file,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from scheduler.model.colocation import ColocationTable

POLLUX_APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
POLLUX = ("petuum/adaptdl osdi21-artifact @c793c7089bd3 simulator/traces/{app}/{name}; Apache-2.0, "
          "Copyright 2020 Petuum, Inc.")
GAVEL = ("stanford-futuredata/gavel @c4fa40097339 scheduler/simulation_throughputs.json; MIT, "
         "Copyright (c) 2020 Stanford Future Data Systems")


def bundled_profiles_dir() -> Path:
    """The bundled profile set (a Sia-format traces directory with types ``t4`` and ``v100``)."""
    return PROFILES_DIR


def default_cluster() -> Path:
    return CLUSTER_FILE


def default_colocation() -> Path:
    return COLOCATION_FILE


def gavel_throughputs() -> Path:
    return GAVEL_FILE


def _header(lines: Sequence[str]) -> str:
    return "".join(f"# {line}\n" for line in lines)


def _copy_with_header(src: Path, dst: Path, source: str) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    note = [f"Source: {source}", "Unchanged below this header; see scheduler/data/SOURCE.md."]
    dst.write_text(_header(note) + src.read_text())


def speed_ratios(gavel: Path, types: Mapping[str, str] = DERIVED_TYPES) -> dict[str, dict[str, float]]:
    """Per bundled type and application: median over the app's Gavel batch sizes of solo tput(type)/tput(P100)."""
    from scheduler.formats.transfer import SIA_TO_GAVEL, read_gavel_isolated

    iso = read_gavel_isolated(gavel)
    out: dict[str, dict[str, float]] = {}
    for bundled, gavel_type in types.items():
        out[bundled] = {}
        for app in POLLUX_APPS:
            model, batches = SIA_TO_GAVEL[app]
            ratios = [iso[(gavel_type, f"{model} (batch size {b})", 1)] / iso[(REFERENCE_GAVEL_TYPE, name, 1)]
                      for b in batches
                      if (name := f"{model} (batch size {b})")
                      and (gavel_type, name, 1) in iso and (REFERENCE_GAVEL_TYPE, name, 1) in iso]
            out[bundled][app] = round(statistics.median(ratios), 4)
    return out


def _derive_type(app: str, t4_placements: Path, dst: Path, gpu: str, ratio: float) -> None:
    import pandas as pd

    rows = pd.read_csv(t4_placements)
    single = rows[rows["placement"].astype(str) == "1"].copy()
    single["step_time"] = single["step_time"] / ratio
    note = [f"Derived {gpu} profile for {app}: Pollux's 1-GPU T4 rows ({POLLUX.format(app=app, name='placements.csv')})",
            f"with step_time divided by {ratio} = Gavel's measured {gpu}/P100 single-GPU throughput ratio for the",
            f"matching model ({GAVEL}). Multi-GPU {gpu} throughput is bootstrapped from T4 at run time (Sia 3.4).",
            "Regenerate: python -m scheduler.formats.bundled"]
    dst.write_text(_header(note) + single.to_csv(index=False))


def _gavel_subset(src: Path, dst: Path) -> None:
    """Gavel's file restricted to scale factor 1 on the consolidated K80/P100/V100 workers."""
    data = json.loads(src.read_text())
    keep = {}
    for gpu in ("k80", "p100", "v100"):
        keep[gpu] = {key: {k: v for k, v in entry.items() if k == "null" or k.endswith(", 1)")}
                     for key, entry in data[gpu].items() if key.endswith(", 1)")}
    dst.write_text(json.dumps(keep, separators=(",", ":")))


def build(shared: Path, out: Path = DATA_DIR) -> list[Path]:
    """Regenerate the bundled profiles, Gavel subset and colocation table from the public data folder."""
    from scheduler.formats.colocation_table import write_colocation_table
    from scheduler.formats.transfer import transferred_frame

    traces = shared / "sia" / "traces"  # Pollux's files, byte-identical copies (pollux/SOURCE.md)
    written: list[Path] = []
    gavel_out = out / "gavel_throughputs_sf1.json"
    _gavel_subset(shared / "gavel" / "simulation_throughputs.json", gavel_out)
    written.append(gavel_out)
    ratios = speed_ratios(gavel_out)
    for app in POLLUX_APPS:
        src = traces / app
        for kind in ("placements", "scalability"):
            dst = out / "profiles" / app / f"{kind}-{MEASURED_TYPE}.csv"
            _copy_with_header(src / f"{kind}.csv", dst, POLLUX.format(app=app, name=f"{kind}.csv"))
            written.append(dst)
        for curve in sorted(src.glob("validation-*.csv")):
            dst = out / "profiles" / app / curve.name
            _copy_with_header(curve, dst, POLLUX.format(app=app, name=curve.name))
            written.append(dst)
        for gpu in DERIVED_TYPES:
            dst = out / "profiles" / app / f"placements-{gpu}.csv"
            _derive_type(app, src / "placements.csv", dst, gpu, ratios[gpu][app])
            written.append(dst)
    frame = transferred_frame(gavel_out, gpu_types=tuple(GPU_MAP), gpu_map=GPU_MAP)
    table = out / "colocation-default.csv"
    write_colocation_table(frame, table)
    note = ["Pair ratios t/t' for the bundled GPU types, transferred from Gavel's measured pairs",
            f"({GAVEL}) by scheduler.formats.transfer: t4 <- P100, v100 <- V100. Regenerate: python -m scheduler.formats.bundled"]
    table.write_text(_header(note) + table.read_text())
    written.append(table)
    return written


REPO_RESULTS = Path(__file__).resolve().parents[2] / "results"
DEFAULT_PRECISION = "tf32"  # what PyTorch runs convolutions in on an Ampere or newer GPU unless told otherwise


def scheduler_rows(frame: "pd.DataFrame") -> "pd.DataFrame":
    """A measured colocation table (``colocate colocation-table``) keyed the way jobs ask for pairs.

    * ``model@batch:tf32`` becomes ``model@batch``: a job of ``colocate serve`` names no precision, and on a GPU
      PyTorch runs its convolutions in TF32 by default (other precisions keep their suffix).
    * One row per pair of *models* is added (``resnet18``, ``se_resnet18``): the measured batch whose Σ ratio is
      the median over the feasible batches (a real measurement, not an average), which a job at an unmeasured
      batch size matches.
    """
    import pandas as pd

    rows = frame.copy()
    for col in ("type_a", "type_b"):
        rows[col] = rows[col].astype(str).str.replace(f":{DEFAULT_PRECISION}", "", regex=False)
    rows["source"] = "measured"
    plain = rows[(rows["ratio_a"] > 0) & (rows["ratio_b"] > 0)
                 & ~rows["type_a"].str.contains(":") & ~rows["type_b"].str.contains(":")]
    models = [plain[c].str.partition("@")[0] for c in ("type_a", "type_b")]
    per_model = []
    for (a, b), group in plain.groupby(models, sort=True):
        group = group.assign(_sum=group["ratio_a"] + group["ratio_b"]).sort_values(["_sum", "type_a"])
        pick = group.iloc[(len(group) - 1) // 2].drop("_sum").copy()
        pick["source"] = f"measured: {pick['type_a']}+{pick['type_b']} (median of {len(group)} batches)"
        pick["type_a"], pick["type_b"] = a, b
        per_model.append(pick)
    out = pd.concat([rows, pd.DataFrame(per_model)], ignore_index=True)
    ratios = [c for c in ("ratio_a", "ratio_b", "delta") if c in out]
    out[ratios] = out[ratios].astype(float).round(6)  # far below the measurements' noise; stable across CSV parsers
    return out


def build_measured(results: Path = REPO_RESULTS, out: Path = DATA_DIR) -> list[Path]:
    """Bundle ``results/<gpu>/matrices/colocation-<sharing>.csv`` (measured on that GPU) as
    ``colocation-<gpu>-<sharing>.csv`` with :func:`scheduler_rows`' keys and a provenance header."""
    from scheduler.formats.colocation_table import read_colocation_table, write_colocation_table

    written = []
    for gpu in MEASURED_GPU_TYPES:
        for sharing in SHARING_MODES:
            src = results / gpu / "matrices" / f"colocation-{sharing}.csv"
            if not src.is_file():
                continue
            dst = out / measured_table_file(gpu, sharing).name
            write_colocation_table(scheduler_rows(read_colocation_table(src)), dst)
            note = [f"Pair ratios t/t' measured by this project on one {gpu.upper()} under {sharing} "
                    f"(results/{gpu}/matrices/colocation-{sharing}.csv; results/{gpu}/REPORT.md: GPU, driver, torch).",
                    "Job types without a precision ran in TF32; plain model names are the median batch of the pair.",
                    "Regenerate: python -m scheduler.formats.bundled"]
            dst.write_text(_header(note) + dst.read_text())
            written.append(dst)
    return written


def measured_table(gpu_types: Sequence[str], sharing: str) -> "ColocationTable | None":
    """The bundled measured pairs of the given GPU types under ``sharing``; None when none of them has any."""
    from scheduler.formats.colocation_table import load_colocation_tables

    files = [f for g in gpu_types if g in MEASURED_GPU_TYPES and (f := measured_table_file(g, sharing)).is_file()]
    return load_colocation_tables(files) if files else None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m scheduler.formats.bundled [SHARED_DATA]``: rewrite ``scheduler/data`` from the public data folder."""
    from scheduler.formats.shared_data import shared_data_dir

    args = list(sys.argv[1:] if argv is None else argv)
    shared = Path(args[0]) if args else shared_data_dir()
    from scheduler.formats.solo_times import build_solo_times

    files = build(shared) + build_measured() + build_solo_times(REPO_RESULTS)
    size = sum(f.stat().st_size for f in DATA_DIR.rglob("*") if f.is_file())
    print(f"wrote {len(files)} files; scheduler/data holds {size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
