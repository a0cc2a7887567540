"""Policy comparison: every policy on every workload at every load point, in parallel processes, then a
markdown report (with JCT across load when several load points are given). ``colocate compare`` is its CLI.

``replicates`` runs each (workload, load) again with every arrival moved by a seeded draw inside one round
(:meth:`~scheduler.formats.workload_jobs.Workload.jittered`, seed = the replicate; 0 is the trace): one run's JCT
moves by a few per cent with such a shift, so differences of that size are judged on the mean.

Runs whose logs already exist in the output directory are kept (resume) unless ``force`` is set.
"""

from __future__ import annotations

import glob as globlib
import json
import os
import re
import subprocess
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from common.errors import InputError
from common.options import option, set_options, shared_option
from scheduler.formats.colocation_table import load_colocation_table
from scheduler.ilp.config import IlpConfig
from scheduler.sim.config import SimConfig

RUN_LOGS = ("summary.json", "jobs.parquet", "rounds.parquet", "allocations.parquet")

# Progress hook: given a description, the total runs and those already done, a context that yields the
# function to call with each finished run's summary row.
ProgressHook = Callable[[str, int, int], AbstractContextManager[Callable[[dict[str, Any]], None]]]


@dataclass(frozen=True)
class CompareRequest:
    """What to compare and where to write it: the options of ``colocate compare`` (checked by the plan)."""

    cluster: Path = shared_option("cluster")
    workloads: str = option(help="Glob of workload files (comma-separate several globs).")
    out: Path = shared_option("out")  # the report directory, e.g. results/sim/NAME
    policies: str = option("colocate,sia,gavel-sia", "Comma-separated policy names.")
    loads: str = option("1", "Load points: multiples of each workload's arrival rate (arrival times divided by it), "
                             "e.g. 0.5,1,1.5,2,3.")
    colocation: Path | None = shared_option("colocation", None, show_default="the bundled tables: transferred from "
                                            "Gavel's measurements, and the pairs measured on the H100 under MPS")
    profiles: Path | None = shared_option("profiles", None, show_default="<shared data>/sia/traces")
    replicates: int = option(1, "Runs per workload and load: replicate 0 is the trace, replicate k moves every "
                                "arrival later by a seeded draw (seed k) inside one 60-s round; tables show the mean "
                                "over replicates, summary.csv every run.")
    workers: int | None = option(None, "Worker processes.", show_default="CPU cores, at most the runs")
    title: str | None = option(None, "Report title.")
    notes: Path | None = option(None, "Markdown file appended to the report as its Analysis section.")
    force: bool = option(False, "Rerun simulations whose results already exist in --out.")
    targets: bool = option(False, "Check the project's JCT targets (colocate vs sia and gavel-sia) in the report.")
    sim: SimConfig = field(default_factory=SimConfig)  # the command line sets it as its own config (--set sim.*)
    # the round-ILP settings of each ILP policy compared (a policy missing here runs with its own)
    ilp: Mapping[str, IlpConfig] = field(default_factory=dict)
    # a results directory's measured pairs (gpu_type, type_a, type_b, ratio_a, ratio_b), read by the command line:
    # the analysis that reads results directories sits above this package
    colocation_rows: tuple[tuple[str, str, str, float, float], ...] | None = None


@dataclass(frozen=True)
class ComparePlan:
    """A validated request: the cluster, files, policies, load points and one task per simulation."""

    request: CompareRequest
    cluster: Any
    files: list[Path]
    names: list[str]
    load_points: list[float]
    tasks: list[dict[str, Any]]
    todo: list[dict[str, Any]]
    n_workers: int


def workload_label(path: Path) -> str:
    """``.../philly/workload-3.csv`` → ``philly-workload-3`` (unique across the Sia workload sets)."""
    return f"{path.parent.name}-{path.stem}" if path.parent.name else path.stem


def expand_workloads(pattern: str) -> list[Path]:
    """Comma-separated globs → sorted, de-duplicated files."""
    files: list[Path] = []
    for part in (p.strip() for p in pattern.split(",")):
        if not part:
            continue
        hits = sorted(globlib.glob(os.path.expanduser(part)))
        if not hits and Path(part).is_file():
            hits = [part]
        files.extend(Path(h) for h in hits if Path(h).is_file())
    unique = sorted(dict.fromkeys(files), key=lambda p: (p.parent.name, _natural(p.stem)))
    if not unique:
        raise InputError(f"no file matches {pattern!r}", field="workloads",
                         valid="a glob such as ../shared/data/sia/workloads/philly/workload-*.csv (comma-separate several)")
    return unique


def _natural(text: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))


def code_version() -> str:
    """``git`` commit of the tree and whether scheduler/ had uncommitted changes (results depend on both)."""
    try:
        repo = Path(__file__).resolve().parents[2]
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "scheduler"], cwd=repo, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not head:
        return "unknown"
    return f"commit {head}" + (" with uncommitted changes under scheduler/" if dirty else "")


def parse_loads(text: str) -> list[float]:
    """``"0.5,1,2"`` → ``[0.5, 1.0, 2.0]``; anything else is an InputError naming ``--loads``."""
    loads = []
    for part in (p.strip() for p in text.split(",")):
        try:
            value = float(part.rstrip("x×"))
        except ValueError:
            value = float("nan")
        if not value > 0 or value == float("inf"):
            raise InputError(f"load {part!r}", field="loads",
                             valid="comma-separated multiples of the arrival rate > 0, e.g. 0.5,1,1.5,2,3")
        loads.append(value)
    return sorted(set(loads))


FAILED_LOG = "failed.txt"  # in a run directory: the one-line reason a simulation stopped


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Run one (workload, load, policy) simulation and write its logs; module-level for worker processes.

    A simulation that stops on a broken invariant (:class:`SimulationError`) does not stop the others: its
    reason goes to ``failed.txt`` in its run directory and the returned row has an ``error``."""
    from common.files import atomic_write_text
    from scheduler.formats.workloads import read_workload
    from scheduler.sim.checks import SimulationError
    from scheduler.sim.simulator import simulate

    out = Path(task["out"])
    work = read_workload(task["workload"]).at_load(task["load"]).jittered(task["replicate"])  # 0: the trace itself
    try:
        result = simulate(task["cluster"], work, task["policy"], colocation=task["colocation"],
                          profiles=task["profiles"], config=task["sim"], ilp=task["ilp"])
    except SimulationError as err:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / FAILED_LOG, f"{err}\n")
        return {"workload": task["label"], "load": task["load"], "replicate": task["replicate"],
                "policy": task["policy"], "error": str(err)}
    (out / FAILED_LOG).unlink(missing_ok=True)
    result.meta["load"] = task["load"]
    result.meta["replicate"] = task["replicate"]
    result.meta["code"] = code_version()
    result.write(out)
    return {"workload": task["label"], "load": task["load"], "replicate": task["replicate"], "policy": task["policy"],
            **result.to_json()}


def _checked_inputs(req: CompareRequest) -> tuple[Any, list[str]]:
    """Check the options and load the cluster; returns it with the canonical policy names."""
    from common.bounds import check_number
    from scheduler.model.cluster import load_cluster
    from scheduler.policies import policy_spec

    if req.workers is not None:
        check_number(req.workers, field="workers", low=1, high=256, integer=True)
    check_number(req.replicates, field="replicates", low=1, high=100, integer=True)
    if req.notes is not None and not req.notes.is_file():
        raise InputError("notes file not found", source=req.notes, field="notes", valid="a Markdown file")
    cluster = load_cluster(req.cluster)
    try:
        names = [policy_spec(p).name for p in req.policies.split(",") if p.strip()]
    except InputError as err:
        raise InputError(err.detail, field="policies", valid=err.valid) from None
    if not names:
        raise InputError("no policy given", field="policies", valid="e.g. colocate,sia,gavel-sia")
    return cluster, names


def plan_comparison(req: CompareRequest) -> ComparePlan:
    """Validate everything before any process starts; list the simulations and those still to run."""
    from profiler.campaign.outdir import prepare_out_dir
    from scheduler.formats.profiles import check_workload
    from scheduler.formats.shared_data import default_profiles_dir
    from scheduler.formats.workloads import read_workload

    cluster, names = _checked_inputs(req)
    files = expand_workloads(req.workloads)
    for f in files:  # fail fast on a malformed file, before any process starts
        check_workload(read_workload(f).jobs, cluster, req.profiles or default_profiles_dir(), f)
    if req.colocation is not None and req.colocation_rows is None:
        load_colocation_table(req.colocation)
    load_points = parse_loads(req.loads)
    prepare_out_dir(req.out)  # only once the inputs are good: a refused run leaves no empty report directory
    tasks: list[dict[str, Any]] = []
    for f in files:
        for load in load_points:
            label = workload_label(f) + ("" if load_points == [1.0] else f"@{load:g}x")
            for k in range(req.replicates):
                runs = req.out / "runs" / label / (f"r{k}" if k else "")
                for p in names:
                    tasks.append({"cluster": str(req.cluster), "workload": str(f), "policy": p, "label": label,
                                  "load": load, "replicate": k, "colocation": _task_table(req),
                                  "sim": req.sim, "profiles": str(req.profiles) if req.profiles else None,
                                  "ilp": req.ilp.get(p), "out": str(runs / p)})
    todo = [t for t in tasks if req.force or not all((Path(t["out"]) / f).is_file() for f in RUN_LOGS)]
    n_workers = req.workers if req.workers is not None else min(os.cpu_count() or 1, max(len(todo), 1))
    return ComparePlan(req, cluster, files, names, load_points, tasks, todo, n_workers)


def run_simulations(plan: ComparePlan, done: Callable[[dict[str, Any]], None]) -> None:
    """Run the plan's outstanding simulations, in a process pool when there are several workers."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    if plan.n_workers <= 1:
        for t in plan.todo:
            done(run_task(t))
    elif plan.todo:
        with ProcessPoolExecutor(max_workers=plan.n_workers) as pool:
            futures = [pool.submit(run_task, t) for t in plan.todo]
            for fut in as_completed(futures):
                done(fut.result())


def _records(plan: ComparePlan) -> list[Any]:
    """Read every run's logs back (fresh and resumed alike) as report records."""
    import pandas as pd

    from scheduler.report.comparison import SimulationRecord, migrations_of

    records = []
    for t in plan.tasks:
        run_dir = Path(t["out"])
        if not (run_dir / "summary.json").is_file():
            continue  # failed (listed in the report's notes by failed_runs)
        summary = json.loads((run_dir / "summary.json").read_text())
        allocations = pd.read_parquet(run_dir / "allocations.parquet")
        moves, pair_moves = migrations_of(allocations)
        records.append(SimulationRecord(t["label"], t["policy"], {k: v for k, v in summary.items() if k != "meta"},
                                 pd.read_parquet(run_dir / "jobs.parquet"), pd.read_parquet(run_dir / "rounds.parquet"),
                                 moves, pair_moves, t["load"], t["replicate"]))
    return records


def run_name(label: str, replicate: int) -> str:
    """How progress lines and the report name a run's workload: ``label``, or ``label rK`` for replicate K > 0."""
    return f"{label} r{replicate}" if replicate else label


def failed_runs(plan: ComparePlan) -> list[str]:
    """``label/policy: reason`` of every run of the plan that stopped on a broken invariant."""
    found = []
    for t in plan.tasks:
        log = Path(t["out"]) / FAILED_LOG
        if log.is_file() and not (Path(t["out"]) / "summary.json").is_file():
            found.append(f"{run_name(t['label'], t['replicate'])}/{t['policy']}: {log.read_text().strip()}")
    return found


def _setup(plan: ComparePlan) -> dict[str, str]:
    """The report's Setup section: what ran, how, where and at which code version."""
    from scheduler.report.load import machine_description

    req, names, load_points = plan.request, plan.names, plan.load_points
    strength, colocation = req.sim.colocation_strength, req.colocation
    types = ", ".join(f"{t.name} {t.nodes}×{t.gpus_per_node}" for t in plan.cluster)
    return {
        "cluster": f"`{req.cluster}` ({plan.cluster.total_gpus} GPUs: {types})",
        "workloads": f"{_count(len(plan.files), 'file')} from `{req.workloads}`",
        "policies": ", ".join(f"`{p}`" for p in names),
        "loads": ", ".join(f"{x:g}×" for x in load_points) + " the workloads' arrival rate (same jobs, arrival "
                 "times divided by the load)",
        **({"replicates": f"{req.replicates} per workload and load (replicate 0: the trace; replicate k: every "
                          "arrival moved later by a seeded draw inside one round); the tables show the mean over "
                          "them, `summary.csv` every run"} if req.replicates > 1 else {}),
        "round": f"{req.sim.round_s:g} s; seed {req.sim.seed}" + (f"; co-location benefit scaled by {strength:g}"
                                                                   if strength != 1 else ""),
        "command": f"`colocate compare --cluster {req.cluster} --workloads '{req.workloads}' "
                   f"--policies {','.join(names)} --loads {','.join(f'{x:g}' for x in load_points)} --out {req.out}"
                   + (f" --replicates {req.replicates}" if req.replicates > 1 else "")
                   + "".join(f" {arg}" for arg in set_options(req.sim, "sim"))
                   + "".join(f" {arg}" for arg in _ilp_args(req))
                   + (f" --colocation {colocation}" if colocation else "")
                   + (f" --profiles {req.profiles}" if req.profiles else "") + "`",
        "machine": f"{machine_description()}; {plan.n_workers} worker processes",
        "code": f"report written at {code_version()}; each run records the code it ran in "
                f"`runs/<workload>/<policy>/summary.json` (meta.code)",
    }


def ilp_changes(req: CompareRequest) -> dict[str, Any]:
    """The round-ILP settings of the request that differ from its policies' own: the user's, applied to each."""
    from scheduler.policies import policy_spec

    changed: dict[str, Any] = {}
    for name, config in req.ilp.items():
        own = policy_spec(name).ilp
        for f in fields(config):
            if getattr(config, f.name) != getattr(own, f.name):
                changed[f.name] = getattr(config, f.name)
    return changed


def _ilp_args(req: CompareRequest) -> list[str]:
    """``--set ilp.FIELD=VALUE`` for each ILP setting of the request that differs from its policy's own."""
    return [f"--set ilp.{k}={'none' if v is None else str(v).lower() if isinstance(v, bool) else v}"
            for k, v in sorted(ilp_changes(req).items())]


def _task_table(req: CompareRequest) -> Any:
    """What each run reads as its colocation table: the CSV's path, or a results directory's pairs as a table."""
    if req.colocation_rows is not None:
        from scheduler.model.colocation import ColocationTable

        return ColocationTable.from_rows(req.colocation_rows)
    return str(req.colocation) if req.colocation else None


def _table_file(req: CompareRequest) -> Path:
    """The table the report describes: the CSV given, or a results directory's pairs written beside the report."""
    if req.colocation_rows is None or req.colocation is None:
        return Path(str(req.colocation))
    import pandas as pd

    from scheduler.formats.colocation_table import write_colocation_table

    frame = pd.DataFrame(list(req.colocation_rows), columns=["gpu_type", "type_a", "type_b", "ratio_a", "ratio_b"])
    return write_colocation_table(frame, req.out / "colocation-measured.csv")


def write_comparison_report(plan: ComparePlan) -> Path:
    """report.md, summary.csv and plots from every run's logs; returns the report's path."""
    from common.safe_load import read_text
    from scheduler.formats.transfer import default_table_files
    from scheduler.policies import policy_spec
    from scheduler.report.comparison import colocation_provenance, write_report

    req = plan.request
    packing = any(policy_spec(p).packing for p in plan.names)
    # the simulator's default table is the union of the bundled tables (scheduler.formats.transfer.default_table)
    tables = [_table_file(req)] if req.colocation is not None else default_table_files()
    notes = read_text(req.notes, field="notes", what="notes file") if req.notes is not None else ""
    failed = failed_runs(plan)
    if failed:
        notes = ("**Failed runs** (stopped on a broken invariant; left out of every table and plot):\n\n"
                 + "\n".join(f"- {line}" for line in failed) + "\n\n" + notes)
    return write_report(_records(plan), req.out, title=req.title or f"Policy comparison: {req.out.name}",
                        setup=_setup(plan), notes=notes, targets=req.targets,
                        colocation_note=colocation_provenance(tables, plan.cluster.type_names) if packing else "")


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def compare_policies(req: CompareRequest, progress: ProgressHook | None = None) -> tuple[Path, Any, list[str]]:
    """Plan, run (resuming) and report a comparison; returns the report path, the mean metrics per
    (load, policy) read back from summary.csv, and the runs that failed (see :func:`failed_runs`)."""
    import pandas as pd

    plan = plan_comparison(req)
    description = (f"{_count(len(plan.names), 'policy', 'policies')} × {_count(len(plan.files), 'workload')} × "
                   f"{_count(len(plan.load_points), 'load')}"
                   + (f" × {req.replicates} replicates" if req.replicates > 1 else "")
                   + f" ({_count(plan.n_workers, 'worker')})")
    tracker = progress(description, len(plan.tasks), len(plan.tasks) - len(plan.todo)) if progress else None
    with tracker if tracker is not None else nullcontext(_ignore) as done:
        run_simulations(plan, done)
    failed = failed_runs(plan)
    if len(failed) == len(plan.tasks):
        raise SimulationFailed(f"every simulation failed, e.g. {failed[0]}")
    report = write_comparison_report(plan)
    frame = pd.read_csv(req.out / "summary.csv")
    if "triple_fraction" not in frame:  # runs logged before groups of three were simulated
        frame["triple_fraction"] = 0.0
    metrics = ["avg_jct_s", "p99_jct_s", "gpu_hours", "packed_fraction", "triple_fraction", "restarts"]
    metrics += [m for m in ("worst_slowdown", "over_bound_fraction") if m in frame]
    means = frame.groupby(["load", "policy"])[metrics].mean()
    return report, means, failed


class SimulationFailed(RuntimeError):
    """Every run of a comparison stopped on a broken invariant: there is nothing to report."""


def _ignore(row: dict[str, Any]) -> None:
    """The progress callback when nobody watches."""


__all__ = ["CompareRequest", "ComparePlan", "compare_policies", "expand_workloads", "ilp_changes", "parse_loads",
           "plan_comparison", "run_name", "run_simulations", "run_task", "workload_label", "write_comparison_report",
           "code_version"]
