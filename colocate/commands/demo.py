"""``colocate demo``: the embedded default pipeline on this machine's device (the README's main command).

1. a small campaign (three models, solo and pairs) on this machine's device;
2. its compatibility matrices (CSV, heatmap PNG, GraphML);
3. a simulated comparison of the `colocate` policy (heterogeneity + adaptivity + packing) against `sia`
   (the same ILP with packing off) on a bundled 24-job workload over Sia's 64-GPU cluster.
"""

from __future__ import annotations

from pathlib import Path

import typer

DEMO_POLICIES = ("colocate", "sia")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo_spec(device: str | None = None):  # -> CampaignSpec
    """The bundled demo campaign, moved to CUDA (with MPS beside time-slicing) when a GPU is present."""
    import dataclasses
    from importlib import resources

    import yaml

    from profiler.mps import mps_unavailable_reason
    from profiler.spec import spec_from_dict

    source = resources.files("colocate") / "examples" / "demo.yaml"
    spec = spec_from_dict(yaml.safe_load(source.read_text()), source=str(source))
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        sharing = ("timeslice", "mps") if mps_unavailable_reason(device) is None else ("timeslice",)
        spec = dataclasses.replace(spec, device=device, sharing=sharing, batch_sizes=(64,), image_size=224,
                                   num_classes=1000, min_window_iters=20, warmup_iters=10, repeats=3)
    return spec


def _example(name: str) -> Path:
    from importlib import resources

    return Path(str(resources.files("scheduler") / "examples" / name))


def demo(
    out: Path = typer.Option(Path("results/demo"), "--out", "-o", help="Results directory."),
    device: str = typer.Option(None, "--device", help="cpu or cuda[:N] [default: cuda if available]."),
    spec_path: Path = typer.Option(None, "--spec", help="Use this campaign instead of the embedded one."),
    skip_simulation: bool = typer.Option(False, "--skip-simulation", help="Stop after the matrices."),
) -> None:
    """Run the embedded default: campaign → compatibility matrix → simulated colocate vs sia comparison."""
    from rich.table import Table

    from colocate.commands._output import campaign_progress, console, summary_table
    from colocate.matrix import write_matrices
    from colocate.results import load_results
    from colocate.summary import cell_summary
    from profiler.campaign import run_campaign

    if spec_path is not None:
        from profiler.spec import load_spec

        spec = load_spec(spec_path)
    else:
        spec = demo_spec(device)
    console.print(f"[bold]1/3 profiling[/] {', '.join(spec.models)} at batch {list(spec.batch_sizes)} on "
                  f"{spec.device} ({', '.join(spec.sharing)}), {spec.repeats} repeats → {out}")
    with campaign_progress("demo campaign") as on_progress:
        store = run_campaign(spec, out, on_progress=on_progress)
    summary = cell_summary(store.runs(), store.jobs())
    console.print(summary_table(summary, "δ = Σ t / max t′ (mean ± 95% CI over repeats)"))
    console.print(f"results: {out}/runs.parquet, jobs.parquet, meta.json (+ CSV copies)")

    console.print("[bold]2/3 compatibility matrix[/]")
    matrices = write_matrices(load_results(out), out / "matrices")
    for path in matrices.files:
        console.print(f"  {path}", highlight=False)

    if skip_simulation:
        return
    from scheduler.workloads import default_profiles_dir

    profiles = default_profiles_dir()
    if not profiles.is_dir():
        console.print(f"[yellow]3/3 simulation not run:[/] it needs Sia's per-GPU-type throughput profiles, read at "
                      f"run time from {profiles} (set COLOCATE_SHARED_DATA to the folder holding sia/traces).")
        return
    from scheduler.simulator import simulate

    cluster, workload = _example("sia-64gpu.yaml"), _example("demo-workload.csv")
    console.print(f"[bold]3/3 simulation[/] {', '.join(DEMO_POLICIES)} on {workload.name} over {cluster.name} "
                  f"(co-location ratios transferred from Gavel's measured pairs)")
    table = Table(title="simulated comparison (lower JCT and GPU-hours are better)")
    for column in ("policy", "completed", "avg JCT (h)", "p99 JCT (h)", "makespan (h)", "GPU-hours", "packed", "wall (s)"):
        table.add_column(column, justify="right" if column != "policy" else "left")
    for policy in DEMO_POLICIES:
        result = simulate(cluster, workload, policy, seed=0)
        result.write(out / "sim" / policy)
        s = result.summary
        table.add_row(policy, f"{s['completed']}/{s['jobs']}", f"{s['avg_jct_s'] / 3600:.2f}",
                      f"{s['p99_jct_s'] / 3600:.2f}", f"{s['makespan_s'] / 3600:.2f}", f"{s['gpu_hours']:.1f}",
                      f"{s['packed_fraction']:.0%}", f"{s['wall_s']:.1f}")
    console.print(table)
    console.print(f"simulation logs: {out}/sim/<policy>/ (jobs.parquet, rounds.parquet, allocations.parquet, "
                  f"summary.json)")
