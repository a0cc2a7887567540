"""``colocate profile SPEC.yaml --out DIR``: run (or resume) a co-location campaign."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from colocate import cli_kit
from colocate.cli_config import input_option


def register(app: cli_kit.App) -> None:
    app.command("profile")(profile)


def profile(
    spec_path: Path = cli_kit.Argument(..., metavar="SPEC.yaml", help="Campaign file (see README)."),
    out: Path = input_option("out", show_default="results/<name>"),
    dry_run: bool = cli_kit.Option(False, "--dry-run", help="List the runs that would execute, run nothing."),
    as_json: bool = input_option("as_json", False),
    backend: str = cli_kit.Option("local", "--backend", help="local, or ray (needs the ray extra)."),
    address: str = cli_kit.Option(None, "--address", help="Ray cluster address for --backend ray."),
) -> None:
    """Measure solo and co-located iteration times; print δ per cell. Rerun the same command to resume."""
    from colocate.analysis.summary import cell_summary
    from colocate.commands._output import console, error_console, summary_table
    from common.errors import InputError
    from profiler.campaign.cells import plan_runs
    from profiler.campaign.outdir import directory_lock
    from profiler.campaign.spec import load_spec
    from profiler.gpu.devices import check_device_exists
    from profiler.results.store import ResultsStore

    spec = load_spec(spec_path)
    check_device_exists(spec.device, source=spec_path)
    out = out or Path("results") / spec.name
    runs = plan_runs(spec)
    if dry_run:
        finished = ResultsStore(out, readonly=True).finished_run_ids()  # a dry run changes nothing
        for run in runs:
            mark = "done" if run.run_id in finished else "todo"
            console.print(f"{mark}  {run.run_id}", highlight=False)
        console.print(f"{len(runs)} runs ({len(finished & {r.run_id for r in runs})} already done) → {out}")
        return
    if backend not in ("local", "ray"):
        raise InputError(f"unknown backend '{backend}'", field="--backend", valid="local, ray")
    if backend == "local":  # a Ray cluster's workers have their own GPUs; here, runs would all fail
        from profiler.gpu.preflight import check_cuda_usable

        check_cuda_usable(spec.device, source=spec_path)
    try:
        with directory_lock(out):  # one campaign per results directory
            store = _run(spec, out, runs, backend, address, as_json)
    except KeyboardInterrupt:
        done = (ResultsStore(out).read_meta().get("sessions") or [{}])[-1].get("runs_executed", 0)
        error_console.print(f"interrupted after {done} runs; rerun the same command to resume", highlight=False)
        raise cli_kit.Exit(130) from None
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


def _run(spec: Any, out: Path, runs: list, backend: str, address: str | None, as_json: bool) -> Any:
    """Run the campaign on the chosen backend under a progress bar; returns its results store."""
    from colocate.commands._output import campaign_progress
    from common.errors import InputError
    from profiler.results.store import ResultsStore

    store = ResultsStore(out)  # damaged files fail here, before the progress bar starts
    store.read_meta()
    store.runs()
    if backend == "local":
        from profiler.campaign.driver import run_campaign

        with campaign_progress(f"campaign {spec.name}", enabled=not as_json) as on_progress:
            return run_campaign(spec, out, on_progress=on_progress, runs=runs)
    try:
        from profiler.campaign.ray_backend import run_campaign_on_ray
    except ImportError as exc:
        raise InputError(f"the ray backend is unavailable ({exc})", field="--backend",
                         valid="local, or install the extra: pip install -e '.[ray]'") from None
    with campaign_progress(f"campaign {spec.name} (ray)", enabled=not as_json) as on_progress:
        return run_campaign_on_ray(spec, out, address=address, on_progress=on_progress, runs=runs)
