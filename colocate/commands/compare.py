"""``colocate compare``: every policy on every workload, in parallel processes, then a markdown report."""

from __future__ import annotations

import glob as globlib
import json
import os
from pathlib import Path
from typing import Any, Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_command)


def workload_label(path: Path) -> str:
    """``.../philly/workload-3.csv`` → ``philly-workload-3`` (unique across the Sia workload sets)."""
    return f"{path.parent.name}-{path.stem}" if path.parent.name else path.stem


def expand_workloads(pattern: str) -> list[Path]:
    """Comma-separated globs → sorted, de-duplicated files."""
    from colocate.errors import InputError

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
        raise InputError(f"no file matches {pattern!r}", source="--workloads", field="workloads",
                         valid="a glob such as ../shared/data/sia/workloads/philly/workload-*.csv (comma-separate several)")
    return unique


def _natural(text: str) -> tuple:
    import re

    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))


def _code_version() -> str:
    """``git`` commit of the tree and whether scheduler/ had uncommitted changes (results depend on both)."""
    import subprocess

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


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Run one (workload, policy) simulation and write its logs; a module-level function for worker processes."""
    from scheduler.simulator import simulate

    out = Path(task["out"])
    result = simulate(task["cluster"], task["workload"], task["policy"], colocation=task["colocation"],
                      round_s=task["round_s"], seed=task["seed"], profiles=task["profiles"])
    result.meta["code"] = _code_version()
    result.write(out)
    return {"workload": task["label"], "policy": task["policy"], **result.to_json()}


def compare_command(
    cluster: Path = typer.Option(..., "--cluster", help="Cluster YAML."),
    workloads: str = typer.Option(..., "--workloads", help="Glob of workload files (comma-separate several globs)."),
    policies: str = typer.Option("colocate,sia,gavel", "--policies", help="Comma-separated policy names."),
    out: Path = typer.Option(..., "--out", "-o", help="Report directory, e.g. results/sim/NAME."),
    colocation: Path = typer.Option(None, "--colocation",
                                    help="Colocation table CSV (default: the bundled table transferred from Gavel)."),
    round_s: float = typer.Option(60.0, "--round", help="Round length in seconds."),
    seed: int = typer.Option(0, "--seed", help="Seed for randomised policies."),
    workers: Optional[int] = typer.Option(None, "--workers",
                                          help="Worker processes (default: CPU cores, at most the runs)."),
    profiles: Path = typer.Option(None, "--profiles", help="Throughput profiles (default: <shared data>/sia/traces)."),
    title: str = typer.Option(None, "--title", help="Report title."),
    notes: Path = typer.Option(None, "--notes", help="Markdown file appended to the report as its Analysis section."),
    force: bool = typer.Option(False, "--force", help="Rerun simulations whose results already exist in --out."),
) -> None:
    """Run the policies on every workload (in parallel processes) and write report.md, summary.csv and plots."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    import pandas as pd
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from colocate.commands._output import console, error_console
    from colocate.errors import InputError
    from profiler.bounds import check_number
    from profiler.outdir import prepare_out_dir
    from profiler.safe_load import read_text
    from scheduler.cluster import load_cluster
    from scheduler.policies import policy_spec
    from scheduler.report import RunRecord, colocation_provenance, migrations_of, write_report
    from scheduler.transfer import DEFAULT_TABLE
    from scheduler.workloads import read_workload

    check_number(round_s, field="--round", low=1, high=86400, valid="seconds in [1, 86400]")
    check_number(seed, field="--seed", low=0, high=2**32 - 1, integer=True)
    if workers is not None:
        check_number(workers, field="--workers", low=1, high=256, integer=True)
    if notes is not None and not notes.is_file():
        raise InputError("notes file not found", source=notes, field="--notes", valid="a Markdown file")
    cluster_obj = load_cluster(cluster)
    try:
        names = [policy_spec(p).name for p in policies.split(",") if p.strip()]
    except InputError as err:
        raise InputError(err.detail, field="--policies", valid=err.valid) from None
    if not names:
        raise InputError("no policy given", source="--policies", field="policies", valid="e.g. colocate,sia,gavel")
    prepare_out_dir(out)
    files = expand_workloads(workloads)
    from scheduler.profiles import check_workload
    from scheduler.workloads import default_profiles_dir

    for f in files:  # fail fast on a malformed file, before any process starts
        check_workload(read_workload(f).jobs, cluster_obj, profiles or default_profiles_dir(), f)
    if colocation is not None:
        from scheduler.colocation import ColocationTable

        ColocationTable.load(colocation)
    tasks = []
    for f in files:
        label = workload_label(f)
        for p in names:
            run_dir = out / "runs" / label / p
            tasks.append({"cluster": str(cluster), "workload": str(f), "policy": p, "label": label,
                          "colocation": str(colocation) if colocation else None, "round_s": round_s, "seed": seed,
                          "profiles": str(profiles) if profiles else None, "out": str(run_dir)})
    logs = ("summary.json", "jobs.parquet", "rounds.parquet", "allocations.parquet")
    todo = [t for t in tasks if force or not all((Path(t["out"]) / f).is_file() for f in logs)]
    n_workers = workers if workers is not None else min(os.cpu_count() or 1, max(len(todo), 1))
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("{task.fields[last]}"), console=error_console)
    with progress:
        bar = progress.add_task(f"{len(names)} policies × {len(files)} workloads ({n_workers} workers)",
                                total=len(tasks), completed=len(tasks) - len(todo), last="")

        def done(row: dict[str, Any]) -> None:
            progress.update(bar, advance=1, last=f"{row['workload']}/{row['policy']}: avg JCT "
                                                  f"{row['avg_jct_s'] / 3600:.2f} h")

        if n_workers <= 1:
            for t in todo:
                done(run_task(t))
        elif todo:
            with ProcessPoolExecutor(max_workers=n_workers) as pool:
                futures = [pool.submit(run_task, t) for t in todo]
                for fut in as_completed(futures):
                    done(fut.result())
    records = []
    for t in tasks:
        run_dir = Path(t["out"])
        summary = json.loads((run_dir / "summary.json").read_text())
        allocations = pd.read_parquet(run_dir / "allocations.parquet")
        moves, pair_moves = migrations_of(allocations)
        records.append(RunRecord(t["label"], t["policy"], {k: v for k, v in summary.items() if k != "meta"},
                                 pd.read_parquet(run_dir / "jobs.parquet"), pd.read_parquet(run_dir / "rounds.parquet"),
                                 moves, pair_moves))
    packing = any(policy_spec(p).packing for p in names)
    table_used = colocation if colocation is not None else (DEFAULT_TABLE if packing else None)
    types = ", ".join(f"{t.name} {t.nodes}×{t.gpus_per_node}" for t in cluster_obj)
    setup = {
        "cluster": f"`{cluster}` ({cluster_obj.total_gpus} GPUs: {types})",
        "workloads": f"{len(files)} files from `{workloads}`",
        "policies": ", ".join(f"`{p}`" for p in names),
        "round": f"{round_s:g} s; seed {seed}",
        "command": f"`colocate compare --cluster {cluster} --workloads '{workloads}' --policies {','.join(names)} "
                   f"--out {out}`" + (f" --colocation {colocation}" if colocation else ""),
        "machine": "2-core CPU dev container",
        "code": f"report written at {_code_version()}; each run records the code it ran in "
                f"`runs/<workload>/<policy>/summary.json` (meta.code)",
    }
    report = write_report(records, out, title=title or f"Policy comparison: {out.name}", setup=setup,
                          colocation_note=colocation_provenance(table_used) if packing else "",
                          notes=read_text(notes, field="--notes", what="notes file") if notes is not None else "")
    frame = pd.read_csv(out / "summary.csv")
    means = frame.groupby("policy")[["avg_jct_s", "p99_jct_s", "gpu_hours", "packed_fraction"]].mean()
    for policy, row in means.iterrows():
        console.print(f"{policy:>13}: avg JCT {row.avg_jct_s / 3600:.3f} h · p99 {row.p99_jct_s / 3600:.2f} h · "
                      f"{row.gpu_hours:.0f} GPU-h · packed {row.packed_fraction:.1%}", highlight=False)
    console.print(f"report: {report}")
