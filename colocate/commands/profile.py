"""``colocate profile SPEC.yaml --out DIR``: run (or resume) a co-location campaign."""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("profile")(profile)


def profile(
    spec_path: Path = typer.Argument(..., metavar="SPEC.yaml", help="Campaign file (see README)."),
    out: Path = typer.Option(None, "--out", "-o", help="Results directory [default: results/<name>]."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the runs that would execute, run nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print per-cell results as JSON instead of a table."),
    backend: str = typer.Option("local", "--backend", help="local, or ray (needs the ray extra)."),
    address: str = typer.Option(None, "--address", help="Ray cluster address for --backend ray."),
) -> None:
    """Measure solo and co-located iteration times; print δ per cell. Rerun the same command to resume."""
    from colocate.commands._output import campaign_progress, console, summary_table
    from colocate.errors import InputError
    from colocate.summary import cell_summary
    from profiler.cells import plan_runs
    from profiler.spec import load_spec
    from profiler.store import ResultsStore

    spec = load_spec(spec_path)
    out = out or Path("results") / spec.name
    runs = plan_runs(spec)
    if dry_run:
        finished = ResultsStore(out).finished_run_ids()
        for run in runs:
            mark = "done" if run.run_id in finished else "todo"
            console.print(f"{mark}  {run.run_id}", highlight=False)
        console.print(f"{len(runs)} runs ({len(finished & {r.run_id for r in runs})} already done) → {out}")
        return
    if backend == "local":
        from profiler.campaign import run_campaign

        with campaign_progress(f"campaign {spec.name}", enabled=not as_json) as on_progress:
            store = run_campaign(spec, out, on_progress=on_progress, runs=runs)
    elif backend == "ray":
        try:
            from profiler.ray_backend import run_campaign_on_ray
        except ImportError as exc:
            raise InputError(f"the ray backend is unavailable ({exc})", field="--backend",
                             valid="local, or install the extra: pip install -e '.[ray]'") from None
        with campaign_progress(f"campaign {spec.name} (ray)", enabled=not as_json) as on_progress:
            store = run_campaign_on_ray(spec, out, address=address, on_progress=on_progress, runs=runs)
    else:
        raise InputError(f"unknown backend '{backend}'", field="--backend", valid="local, ray")
    summary = cell_summary(store.runs(), store.jobs())
    if as_json:
        records = json.loads(summary.to_json(orient="records"))
        print(json.dumps({"campaign": spec.name, "out": str(out), "cells": records}, indent=2))
        return
    console.print(summary_table(summary, f"{spec.name}: δ = Σ t / max t′ (mean ± 95% CI over repeats)"))
    meta = store.read_meta()
    last = (meta.get("sessions") or [{}])[-1]
    efficiency = last.get("efficiency")
    console.print(f"results in {out}/ (runs.parquet, jobs.parquet, meta.json + CSV); "
                  f"this session: {last.get('runs_executed', 0)} runs in {last.get('wall_s', 0):.1f} s"
                  + (f", window/wall efficiency {efficiency:.0%}" if efficiency and not math.isnan(efficiency) else ""))
