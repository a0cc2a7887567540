"""Throughput profiles and gradient-noise curves: readers for our generic CSV and for Sia's artifact traces.

Everything is normalised to one long table (a :class:`pandas.DataFrame`) with the columns of
:data:`PROFILE_COLUMNS`: ``application, gpu_type, num_nodes, num_gpus, local_bsz, step_time, sync_time``
(``step_time`` = seconds per iteration, ``sync_time`` = the all-reduce part when known, else NaN).

* **Generic CSV** (``application,gpu_type,num_gpus,batch_size,throughput[,num_nodes]``): ``batch_size`` is
  the global batch, ``throughput`` samples/s; ``num_nodes`` defaults to 1.
* **Sia traces** (a directory ``<root>/<model>/placements-<gpu>.csv`` with ``local_bsz,step_time,
  sync_time,placement``; ``placement`` has one digit per node = GPUs used there) and the multi-node
  ``scalability-<gpu>.csv`` (``num_nodes,num_replicas,...``). The GPU type is the file suffix (``aws`` =
  T4, ``dgx-ext`` = A100, ``rtx`` = 2080Ti, ``quad``, ``azure``, ``dgx``).
* **GNS curves** (Sia/Pollux ``validation-<global_bsz>.csv``: ``progress,iteration,metric,grad_sqr,
  grad_var``): per application, the curve measured at the smallest batch size is the reference ``M0``.

Sia's files are read at run time from wherever the user keeps them; nothing of them is copied into the
project. Lines starting with ``#`` are comments (the bundled Pollux-derived set in ``scheduler/data`` carries
its attribution that way; see :mod:`scheduler.formats.bundled`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from common.errors import InputError
from scheduler.model.efficiency import GnsCurve

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from scheduler.model.goodput import ProfileGoodputModel

PROFILE_COLUMNS = ("application", "gpu_type", "num_nodes", "num_gpus", "local_bsz", "step_time", "sync_time")
GENERIC_COLUMNS = ("application", "gpu_type", "num_gpus", "batch_size", "throughput")

_PLACEMENTS = re.compile(r"^placements-(?P<gpu>.+)\.csv$")
_SCALABILITY = re.compile(r"^scalability-(?P<gpu>.+)\.csv$")
_VALIDATION = re.compile(r"^validation-(?P<bsz>\d+)\.csv$")


def _read_csv(path: Path, required: Iterable[str]) -> "pd.DataFrame":
    import pandas as pd

    try:
        # bundled files carry attribution lines starting with #; a BOM from spreadsheet exports is allowed
        frame = pd.read_csv(path, comment="#", encoding="utf-8-sig")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise InputError(f"not a readable CSV ({type(err).__name__})", source=path, field=next(iter(required)),
                         valid="header " + ",".join(required)) from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}", source=path, field=missing[0],
                         valid="header " + ",".join(required))
    return frame


def _check_positive(frame: "pd.DataFrame", columns: Iterable[str], path: Path | str) -> None:
    import pandas as pd

    for col in columns:
        numeric = pd.to_numeric(frame[col], errors="coerce")
        bad = numeric.isna() | ~(numeric > 0) | ~np.isfinite(numeric.fillna(0))
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise InputError(f"row {i + 2}: {col} = '{str(frame[col].iloc[i])[:60]}'", source=path, field=col,
                             valid="a number > 0")
        frame[col] = numeric


def read_generic_profiles(path: str | Path) -> "pd.DataFrame":
    """Read ``application,gpu_type,num_gpus,batch_size,throughput[,num_nodes]`` into :data:`PROFILE_COLUMNS`."""
    p = Path(path)
    if not p.is_file():
        raise InputError("profiles file not found", source=p, field="profiles", valid="a CSV file or Sia traces dir")
    frame = _read_csv(p, GENERIC_COLUMNS)
    if "num_nodes" not in frame.columns:
        frame["num_nodes"] = 1
    for col in ("application", "gpu_type"):
        blank = frame[col].isna() | (frame[col].astype(str).str.strip() == "")
        if blank.any():
            i = int(blank.to_numpy().nonzero()[0][0])
            raise InputError(f"row {i + 2}: empty {col}", source=p, field=col, valid="a non-empty name")
        frame[col] = frame[col].astype(str).str.strip()
    _check_positive(frame, ("num_gpus", "batch_size", "throughput", "num_nodes"), p)
    for col in ("num_gpus", "num_nodes"):
        frac = frame[col] != frame[col].round()
        if frac.any():
            i = int(frac.to_numpy().nonzero()[0][0])
            raise InputError(f"row {i + 2}: {col} = {frame[col].iloc[i]}", source=p, field=col, valid="an integer >= 1")
    import pandas as pd

    key = ["application", "gpu_type", "num_nodes", "num_gpus", "batch_size"]
    clash = frame.duplicated(key, keep=False) & ~frame.duplicated(key + ["throughput"], keep=False)
    if clash.any():
        i = int(clash.to_numpy().nonzero()[0][-1])
        row = frame.iloc[i]
        raise InputError(f"row {i + 2}: a second, different throughput for {row['application']} on {row['gpu_type']} "
                         f"with {int(row['num_gpus'])} GPUs at batch {row['batch_size']:g}", source=p,
                         field="throughput", valid="one row per application, GPU type, GPU count and batch size")
    frame = frame.drop_duplicates(key)
    out = pd.DataFrame({
        "application": frame["application"],
        "gpu_type": frame["gpu_type"],
        "num_nodes": frame["num_nodes"].astype(int),
        "num_gpus": frame["num_gpus"].astype(int),
        "local_bsz": frame["batch_size"] / frame["num_gpus"],
        "step_time": frame["batch_size"] / frame["throughput"],
        "sync_time": np.nan,
    })
    return out


def read_sia_profiles(root: str | Path, applications: Iterable[str] | None = None,
                      gpu_types: Iterable[str] | None = None) -> "pd.DataFrame":
    """Read Sia's ``<root>/<model>/placements-<gpu>.csv`` and ``scalability-<gpu>.csv`` files."""
    import pandas as pd

    base = Path(root)
    if not base.is_dir():
        raise InputError("Sia traces directory not found", source=base, field="profiles",
                         valid="a directory holding <model>/placements-<gpu>.csv")
    wanted_apps = set(applications) if applications is not None else None
    wanted_types = set(gpu_types) if gpu_types is not None else None
    frames = []
    for model_dir in sorted(d for d in base.iterdir() if d.is_dir()):
        app = model_dir.name
        if wanted_apps is not None and app not in wanted_apps:
            continue
        for f in sorted(model_dir.iterdir()):
            m = _PLACEMENTS.match(f.name)
            s = _SCALABILITY.match(f.name)
            found = m or s
            if found is None:
                continue
            gpu = found.group("gpu")
            if wanted_types is not None and gpu not in wanted_types:
                continue
            if m:
                raw = _read_csv(f, ("local_bsz", "step_time", "sync_time", "placement"))
                digits = raw["placement"].astype(str)
                if not digits.str.fullmatch(r"[0-9]+").all():
                    i = int((~digits.str.fullmatch(r"[0-9]+")).to_numpy().nonzero()[0][0])
                    raise InputError(f"row {i + 2}: placement {digits.iloc[i]!r}", source=f, field="placement",
                                     valid="digits, one per node = GPUs used on it")
                nodes = digits.map(lambda d: sum(1 for c in d if c != "0"))
                gpus = digits.map(lambda d: sum(int(c) for c in d))
            else:
                raw = _read_csv(f, ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"))
                nodes, gpus = raw["num_nodes"].astype(int), raw["num_replicas"].astype(int)
            _check_positive(raw, ("local_bsz", "step_time"), f)
            frames.append(pd.DataFrame({
                "application": app, "gpu_type": gpu, "num_nodes": nodes.astype(int), "num_gpus": gpus.astype(int),
                "local_bsz": raw["local_bsz"].astype(float), "step_time": raw["step_time"].astype(float),
                "sync_time": pd.to_numeric(raw["sync_time"], errors="coerce"),
            }))
    if not frames:
        _raise_no_profiles(base, wanted_apps, wanted_types)
    out = pd.concat(frames, ignore_index=True)
    return out[out["num_gpus"] > 0].reset_index(drop=True)


def _raise_no_profiles(base: Path, apps: set[str] | None, types: set[str] | None) -> None:
    """Name what is missing: the asked GPU types (or applications) without profiles, and the ones there are."""
    from scheduler.formats.shared_data import ENV_VAR

    present = sorted({found.group("gpu") for d in base.iterdir() if d.is_dir() for f in d.iterdir()
                      if (found := _PLACEMENTS.match(f.name) or _SCALABILITY.match(f.name))})
    if not present:
        raise InputError("no placements-<gpu>.csv files found", source=base, field="profiles",
                         valid="a directory holding <model>/placements-<gpu>.csv")
    if types:
        raise InputError(f"no throughput profiles for the cluster's GPU type(s) {', '.join(sorted(types))}; "
                         f"this directory profiles {', '.join(present)}", source=base, field="profiles",
                         valid=f"a cluster of {', '.join(present)} GPUs, or Sia's traces directory (its artifact's "
                               f"traces/, found via ${ENV_VAR}/sia/traces) for Sia's GPU types")
    raise InputError(f"no profiles for the application(s) {', '.join(sorted(apps or ()))}", source=base,
                     field="profiles", valid=", ".join(sorted(d.name for d in base.iterdir() if d.is_dir())))


def read_gns_curves(root: str | Path, applications: Iterable[str] | None = None) -> dict[str, GnsCurve]:
    """Read ``<root>/<model>/validation-<bsz>.csv``; the smallest batch's curve is the reference."""
    base = Path(root)
    wanted = set(applications) if applications is not None else None
    curves: dict[str, GnsCurve] = {}
    if not base.is_dir():
        return curves
    for model_dir in sorted(d for d in base.iterdir() if d.is_dir()):
        if wanted is not None and model_dir.name not in wanted:
            continue
        sizes = sorted(int(m.group("bsz")) for f in model_dir.iterdir() if (m := _VALIDATION.match(f.name)))
        if not sizes:
            continue
        ref = model_dir / f"validation-{sizes[0]}.csv"
        frame = _read_csv(ref, ("progress", "grad_sqr", "grad_var")).sort_values("progress")
        frame = frame.dropna(subset=["progress", "grad_sqr", "grad_var"])
        if frame.empty:
            continue
        curves[model_dir.name] = GnsCurve(
            application=model_dir.name, init_batch_size=sizes[0], max_batch_size=sizes[-1],
            progress=tuple(float(x) for x in frame["progress"]),
            grad_sqr=tuple(float(x) for x in frame["grad_sqr"]),
            grad_var=tuple(float(x) for x in frame["grad_var"]),
        )
    return curves


def is_sia_traces_dir(path: Path) -> bool:
    return path.is_dir() and any(path.glob("*/placements-*.csv"))


def load_profiles(path: str | Path) -> tuple["pd.DataFrame", dict[str, GnsCurve]]:
    """A generic CSV file, or a Sia traces directory (profiles + GNS curves). Returns (profiles, curves)."""
    p = Path(path)
    if p.is_dir():
        if not is_sia_traces_dir(p):
            raise InputError("directory holds no <model>/placements-<gpu>.csv", source=p, field="profiles",
                             valid="a generic profile CSV or a Sia traces directory")
        return read_sia_profiles(p), read_gns_curves(p)
    return read_generic_profiles(p), {}


def check_workload(jobs: Iterable, cluster: Any, path: str | Path, source: str | Path) -> None:
    """Refuse, naming the workload's file, a job larger than every GPU type of ``cluster`` (it would never
    run, and the simulation would go on to its horizon) or whose application has no profile in ``path``
    (the simulator reads profiles only for the workload's applications, so it would blame ``path``).
    """
    jobs = list(jobs)
    largest = max(t.total_gpus for t in cluster)
    for job in jobs:
        if job.num_gpus > largest:
            raise InputError(f"job {job.name} asks for {job.num_gpus} GPUs; the largest GPU type of the cluster has "
                             f"{largest}", source=source, field="num_replicas", valid=f"an integer in [1, {largest}]")
    p = Path(path)
    if p.is_dir():
        known = {f.parent.name for f in p.glob("*/placements-*.csv")}
    elif p.is_file():
        known = set(read_generic_profiles(p)["application"])
    else:
        return  # the reader itself reports a missing profiles path
    for job in jobs:
        if job.application not in known:
            raise InputError(f"job {job.name}: no throughput profile for application {job.application!r} in {p}",
                             source=source, field="application", valid=", ".join(sorted(known)) or "none found")


def load_goodput_model(path: str | Path) -> "ProfileGoodputModel":
    """A goodput model from a generic profile CSV or a Sia traces directory (see :func:`load_profiles`)."""
    from scheduler.model.goodput import ProfileGoodputModel

    profiles, curves = load_profiles(path)
    return ProfileGoodputModel(profiles, curves)
