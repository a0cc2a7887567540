"""Where the bundled default data lies (``scheduler/data/``) and which GPU types it names.

A leaf module (it imports nothing of the project) so that the data resolver (:mod:`scheduler.formats.shared_data`),
the transferred tables (:mod:`scheduler.formats.transfer`) and the builder (:mod:`scheduler.formats.bundled`) can all read
these paths without importing one another in a circle. :mod:`scheduler.formats.bundled` documents the data itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
PROFILES_DIR = DATA_DIR / "profiles"
CLUSTER_FILE = DATA_DIR / "cluster-default.yaml"
COLOCATION_FILE = DATA_DIR / "colocation-default.csv"
GAVEL_FILE = DATA_DIR / "gavel_throughputs_sf1.json"

MEASURED_TYPE = "t4"
DERIVED_TYPES: Mapping[str, str] = {"v100": "v100"}  # bundled type -> Gavel worker type measured on it
REFERENCE_GAVEL_TYPE = "p100"  # Gavel's stand-in for the T4 (FP32 throughput, memory)
GPU_MAP: Mapping[str, str] = {MEASURED_TYPE: REFERENCE_GAVEL_TYPE, **DERIVED_TYPES}

# Pair ratios this project measured on a GPU, per GPU type and sharing mode (bundled from results/<gpu>/matrices)
SHARING_MODES = ("mps", "timeslice")
MEASURED_GPU_TYPES = ("h100",)
SIMULATOR_SHARING = "mps"  # the mode of the measured rows in the simulator's default table (space sharing, as Gavel's)


def measured_table_file(gpu_type: str, sharing: str) -> Path:
    """``scheduler/data/colocation-<gpu>-<sharing>.csv``: the pairs measured on ``gpu_type`` under ``sharing``."""
    return DATA_DIR / f"colocation-{gpu_type}-{sharing}.csv"
