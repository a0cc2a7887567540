"""Where the public data sets (Sia's traces and workloads, Gavel's throughputs) are found: one resolver.

``$COLOCATE_SHARED_DATA`` wins; otherwise ``shared/data`` beside the repository, above the working
directory or inside it. The data is read where it lies and never copied into the repository.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from scheduler.formats.bundled_files import GPU_MAP, PROFILES_DIR

ENV_VAR = "COLOCATE_SHARED_DATA"


def shared_data_dir() -> Path:
    """``$COLOCATE_SHARED_DATA`` if set, else ``../shared/data`` beside the repository (or the working dir)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2]
    for base in (repo.parent / "shared" / "data", Path.cwd().parent / "shared" / "data", Path.cwd() / "shared" / "data"):
        if base.is_dir():
            return base
    return repo.parent / "shared" / "data"


def default_profiles_dir(gpu_types: Iterable[str] | None = None) -> Path:
    """Sia's per-GPU-type profiles (``<shared>/sia/traces``, read at run time, never copied) when present,
    else the bundled Pollux-derived set (:mod:`scheduler.formats.bundled`); the bundled set also when every one of
    ``gpu_types`` is a bundled type (``t4``, ``v100``), which Sia's traces do not name."""
    types = set(gpu_types or ())
    sia = shared_data_dir() / "sia" / "traces"
    if sia.is_dir() and not (types and types <= set(GPU_MAP)):
        return sia
    return PROFILES_DIR


def gavel_throughputs_path() -> Path:
    """Gavel's ``simulation_throughputs.json`` (``<shared>/gavel``)."""
    return shared_data_dir() / "gavel" / "simulation_throughputs.json"
