"""``colocate demo``: the embedded default pipeline on this machine's device (the README's main command).

1. a small campaign (three models, solo and pairs) on this machine's device;
2. its compatibility matrices (CSV, heatmap PNG, GraphML);
3. a simulated comparison of the `colocate` policy (heterogeneity + adaptivity + packing) against `sia`
   (the same ILP with packing off) on a bundled 24-job workload over the bundled default 32-GPU cluster
   (:mod:`scheduler.formats.bundled`: Pollux's T4 profiles, a V100 type derived from them, Gavel's pair ratios),
   so a clean clone runs all three steps without any external data.
"""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.cli_config import input_option

DEMO_POLICIES = ("colocate", "sia")


def register(app: cli_kit.App) -> None:
    app.command("demo")(demo)


def demo_spec(device: str | None = None):  # -> CampaignSpec
    """The bundled demo campaign, moved to CUDA (with MPS beside time-slicing) when a GPU is present."""
    import dataclasses
    from importlib import resources

    from common.safe_load import parse_yaml
    from profiler.campaign.spec import spec_from_dict
    from profiler.gpu.mps import mps_unavailable_reason

    source = resources.files("colocate") / "examples" / "demo.yaml"
    spec = spec_from_dict(parse_yaml(source.read_text(), source=str(source)), source=str(source))
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
    out: Path = input_option("out", Path("results/demo")),
    device: str = cli_kit.Option(None, "--device", help="cpu or cuda[:N].", show_default="cuda if available"),
    spec_path: Path = cli_kit.Option(None, "--spec", help="Use this campaign instead of the embedded one."),
    skip_simulation: bool = cli_kit.Option(False, "--skip-simulation", help="Stop after the matrices."),
) -> None:
    """Run the embedded default: campaign → compatibility matrix → simulated colocate vs sia comparison."""
    from colocate.analysis.matrix import write_matrices
    from colocate.analysis.results import load_results
    from colocate.analysis.summary import cell_summary
    from colocate.commands._output import campaign_progress, console, summary_table
    from profiler.campaign.driver import run_campaign
    from profiler.campaign.outdir import check_out_dir

    check_out_dir(out)  # a file, under a file, not writable: one line before the campaign starts
    if spec_path is not None:
        from profiler.campaign.spec import load_spec

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

    sim_dir = None
    if not skip_simulation:
        sim_dir = run_demo_simulation(out)
    _where_outputs_are(out, sim_dir)


def run_demo_simulation(out: Path) -> Path:
    """Step 3 on the bundled default (cluster, profiles, colocation table: :mod:`scheduler.formats.bundled`)."""
    from rich.table import Table

    from colocate.commands._output import console
    from scheduler.formats import bundled
    from scheduler.model.cluster import load_cluster
    from scheduler.sim.simulator import simulate

    cluster, workload = load_cluster(bundled.default_cluster()), _example("demo-workload.csv")
    console.print(f"[bold]3/3 simulation[/] {', '.join(DEMO_POLICIES)} on {workload.name} over the bundled "
                  f"default cluster ({cluster.total_gpus} GPUs: {', '.join(cluster.type_names)}; T4 profiles "
                  "from Pollux, V100 derived with Gavel's measured speed ratios; "
                  f"co-location ratios transferred from Gavel's measured pairs)")
    table = Table(title="simulated comparison (lower JCT and GPU-hours are better)")
    for column in ("policy", "completed", "avg JCT (h)", "p99 JCT (h)", "makespan (h)", "GPU-hours", "packed", "wall (s)"):
        table.add_column(column, justify="right" if column != "policy" else "left")
    for policy in DEMO_POLICIES:
        result = simulate(cluster, workload, policy, colocation=bundled.default_colocation(), seed=0,
                          profiles=bundled.bundled_profiles_dir())
        result.write(out / "sim" / policy)
        s = result.summary
        table.add_row(policy, f"{s['completed']}/{s['jobs']}", f"{s['avg_jct_s'] / 3600:.2f}",
                      f"{s['p99_jct_s'] / 3600:.2f}", f"{s['makespan_s'] / 3600:.2f}", f"{s['gpu_hours']:.1f}",
                      f"{s['packed_fraction']:.0%}", f"{s['wall_s']:.1f}")
    console.print(table)
    return out / "sim"


def _where_outputs_are(out: Path, sim_dir: Path | None) -> None:
    """The closing note: each output, where it is and what it shows."""
    from colocate.commands._output import console

    console.print("[bold]outputs[/]")
    lines = [
        (f"{out}/runs.parquet, jobs.parquet (+ .csv), meta.json",
         "every measured run: iteration times alone (t) and co-located (t′), δ, slowdowns, device and versions"),
        (f"{out}/matrices/matrix_*_delta.csv / .png",
         "the compatibility matrix: δ per pair of job types (> 1: sharing a device beats running back to back)"),
        (f"{out}/matrices/pairs.csv, graph_*.graphml",
         "one row per pair with its 95 % CI and both jobs' ratios t/t′; the compatibility graph"),
    ]
    if sim_dir is not None:
        lines.append((f"{sim_dir}/<policy>/summary.json, jobs.parquet, rounds.parquet, allocations.parquet",
                      "per policy: JCTs, GPU-hours, what each round allocated and which jobs were packed"))
    else:
        lines.append(("(simulation skipped)", "rerun without --skip-simulation for the scheduler comparison"))
    for where, what in lines:
        console.print(f"  {where}\n      {what}", highlight=False)
