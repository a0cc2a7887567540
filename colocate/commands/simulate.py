"""``colocate simulate``: run one policy over one workload in the trace-driven cluster simulator."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_command)


def _group_option(policy: str, max_group_size: int | None) -> dict[str, Any]:
    """``--max-group-size`` as the ILP option (IlpConfig checks its value); only the ILP policies pack groups."""
    if max_group_size is None:
        return {}
    if policy not in ("colocate", "colocate-triples"):
        from common.errors import InputError

        raise InputError(f"--max-group-size with policy {policy!r}", field="--max-group-size",
                         valid="--policy colocate or colocate-triples (the ILP policies that pack groups)")
    return {"max_group_size": max_group_size}


def _hours(seconds: float) -> str:
    return "–" if not math.isfinite(seconds) else f"{seconds / 3600:.2f} h"


def _colocation(path: Path | None):  # -> ColocationTable | None
    """The ``--colocation`` table, read before the simulation starts (a bad file is an error before any
    progress): a CSV as it is, a results directory's measured pairs as a table."""
    if path is None:
        return None
    if not path.is_dir():
        from scheduler.formats.colocation_table import load_colocation_table

        return load_colocation_table(path)
    from colocate.analysis.matrix import measured_colocation_table
    from colocate.analysis.results import load_results
    from scheduler.model.colocation import ColocationTable

    return ColocationTable.from_frame(measured_colocation_table(load_results(path)))


def _check_belief_table(belief: str) -> None:
    """``--belief table:FILE``: the file read once before the simulation starts, so a bad one is a one-line
    error before any progress (the simulator reads it again as its prior)."""
    from scheduler.learning.belief import parse_belief, read_belief_table

    spec = parse_belief(belief)
    if spec.kind == "table":
        read_belief_table(spec)


@contextmanager
def _progress_bar(description: str, total: int, *, hidden: bool) -> Iterator[Callable[[float, int, int], None]]:
    """A Rich progress bar on stderr (off for ``--json``); yields the simulator's per-round callback."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from colocate.commands._output import error_console

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("jobs done · simulated {task.fields[sim]}"), TimeElapsedColumn(),
                        console=error_console, disable=hidden, transient=False)
    with progress:
        task = progress.add_task(description, total=total, sim="0.0 h")

        def on_round(sim_time: float, done: int, total: int) -> None:
            progress.update(task, completed=done, sim=f"{sim_time / 3600:.1f} h")

        yield on_round


def _print_summary(result: Any, title: str, out: Path | None) -> None:
    """The run's metrics as a table, then solver fallbacks and where the logs went."""
    from rich.table import Table

    from colocate.commands._output import console

    s = result.summary
    table = Table(title=title, show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("jobs completed", f"{s['completed']}/{s['jobs']}"), ("average JCT", _hours(s["avg_jct_s"])),
        ("median JCT", _hours(s["p50_jct_s"])), ("p99 JCT", _hours(s["p99_jct_s"])),
        ("makespan", _hours(s["makespan_s"])), ("GPU-hours", f"{s['gpu_hours']:.1f}"),
        ("utilization", f"{s['utilization']:.1%}"), ("restarts", str(s["restarts"])),
        ("packed fraction", f"{s['packed_fraction']:.1%}"), ("wall time", f"{s['wall_s']:.1f} s"),
    ]
    if result.meta.get("max_group_size", 2) >= 3:  # GPU-time share with three jobs on the GPUs
        rows.insert(-1, ("triple fraction", f"{s['triple_fraction']:.1%}"))
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
    if result.meta.get("solver_fallback_rounds"):
        console.print(f"[yellow]{result.meta['solver_fallback_rounds']} rounds used the solver's incumbent or the "
                      f"greedy fallback[/]")
    if out is not None:
        console.print(f"logs in {out}/ (jobs.parquet, rounds.parquet, allocations.parquet, summary.json)")


def simulate_command(
    cluster: Path = typer.Option(..., "--cluster", help="Cluster YAML (e.g. scheduler/examples/sia-64gpu.yaml)."),
    workload: Path = typer.Option(..., "--workload", help="Sia/Pollux workload CSV, Gavel .trace or Philly job CSV."),
    policy: str = typer.Option("colocate", "--policy",
                               help="colocate, colocate-triples, sia, gavel, gavel-packed, tiresias, gandiva or fifo."),
    max_group_size: Optional[int] = typer.Option(None, "--max-group-size",
                                                 help="Jobs per GPU group for the ILP policies: 2 (pairs) or 3 "
                                                      "(pairs and triples; triple ratios predicted from the pairs). "
                                                      "Default: the policy's own (colocate 2, colocate-triples 3)."),
    colocation: Path = typer.Option(None, "--colocation",
                                    help="Colocation table CSV, or a results directory (e.g. from import-pairs) "
                                         "whose measured pairs become one (default for packing policies: the "
                                         "bundled tables: transferred from Gavel's measurements, and the "
                                         "pairs measured on the H100 under MPS)."),
    round_s: float = typer.Option(60.0, "--round", help="Round length in seconds."),
    seed: int = typer.Option(0, "--seed", help="Seed (randomised policies such as gandiva)."),
    out: Path = typer.Option(None, "--out", "-o", help="Write jobs/rounds/allocations Parquet + summary.json here."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object."),
    profiles: Path = typer.Option(None, "--profiles",
                                  help="Throughput profiles: Sia traces dir or profile CSV (default: "
                                       "<shared data>/sia/traces)."),
    throughput: str = typer.Option("fitted", "--throughput",
                                   help="fitted: a step-time model fitted to the configurations each job ran (Sia); "
                                        "bootstrap: profiles of the GPU types a job ran on, projected to the "
                                        "others; oracle: every profile known."),
    first_run: str = typer.Option("blind", "--first-run",
                                  help="fitted throughput only. blind: a job never run looks alike on one GPU of "
                                       "every type (Sia's simulator; it migrates once measured); profiled: the "
                                       "profiles' values (earlier)."),
    throughput_fit: str = typer.Option("pollux", "--throughput-fit",
                                       help="fitted throughput only. pollux: Pollux's joint fit of the step-time "
                                            "model to the points a job ran (Sia's scheduler); lines: a line per "
                                            "term to its own measurement (earlier, more optimistic)."),
    efficiency_belief: str = typer.Option("extrapolated", "--efficiency-belief",
                                          help="fitted throughput only. extrapolated: a job's efficiency at other "
                                               "batches from the gradient noise it measured when it last ran "
                                               "(Pollux's formula, Sia's scheduler); curves: the validation curves "
                                               "at every batch (earlier)."),
    measure_batches: str = typer.Option("each", "--measure-batches",
                                        help="fitted throughput only. each: a job measures every batch it runs in a "
                                             "round, its gradient noise at the last (Sia's simulator, a point per "
                                             "epoch); first: the batch it began the round with (earlier)."),
    step_times: str = typer.Option("interpolated", "--step-times",
                                   help="True step times: interpolated from the profile rows (Sia's simulator) "
                                        "or fitted (Pollux-form fit, measured points as measured)."),
    batch: str = typer.Option("app-max", "--batch",
                              help="app-max: adaptive jobs grow to the application's largest batch (Sia); "
                                   "workload: they run the batch the policy chose."),
    restart_on: str = typer.Option("placement", "--restart-on",
                                   help="placement: restart on a new GPU type or GPUs on each node (Sia); shape: "
                                        "on a new type, GPU count or node count; gpus: on any change of GPU indices."),
    substeps: int = typer.Option(6, "--substeps",
                                 help="Times a job alone re-reads its goodput per round (its efficiency rises with "
                                      "progress; Sia re-reads it every epoch). 1: once per round (earlier)."),
    gavel_rounds: str = typer.Option("sia", "--gavel-rounds",
                                     help="gavel only. sia: Sia's simulator's mechanism (held 6-minute rounds, "
                                          "exact GPUs split over nodes, interior LP point); refill: the earlier "
                                          "work-conserving mechanism."),
    efficiency: str = typer.Option("sia", "--efficiency",
                                   help="sia: validation curves at the job's batch; gns: initial batch's GNS curve."),
    memory: bool = typer.Option(True, "--memory/--no-memory", help="Enforce pair memory (default on)."),
    strength: float = typer.Option(1.0, "--colocation-strength",
                                   help="Scale every pair's benefit Σr−1 (<1 weaker, >1 stronger)."),
    belief: str = typer.Option("truth", "--belief",
                               help="What packing policies believe about pairs: truth (the table itself), none, "
                                    "predicted, table:FILE or noisy:SIGMA; all but truth learn as pairs run."),
    explore_contention: Optional[float] = typer.Option(
        None, "--explore-contention",
        help="A learning --belief tries unknown pairs only in rounds whose jobs ask for >= this x the cluster's "
             "GPUs (default 1); 0: in every round (the earlier rule)."),
) -> None:
    """Simulate a workload under one policy; print JCTs, makespan, GPU-hours, utilization, packing."""
    from common.bounds import check_number
    from common.safe_load import json_text
    from profiler.campaign.outdir import prepare_out_dir
    from scheduler.formats.workloads import read_workload
    from scheduler.model.cluster import load_cluster
    from scheduler.policies import policy_spec
    from scheduler.sim.config import SimConfig
    from scheduler.sim.simulator import simulate

    check_number(round_s, field="--round", low=1, high=86400, valid="seconds in [1, 86400]")
    check_number(seed, field="--seed", low=0, high=2**32 - 1, integer=True)
    if out is not None:
        prepare_out_dir(out)
    spec = policy_spec(policy)
    options = _group_option(spec.name, max_group_size)
    config = SimConfig(round_s=round_s, seed=seed, throughput=throughput, first_run=first_run,
                       throughput_fit=throughput_fit, efficiency_belief=efficiency_belief,
                       measure_batches=measure_batches, batch=batch,
                       restart_on=restart_on,
                       efficiency=efficiency, memory=memory, colocation_strength=strength, belief=belief,
                       step_times=step_times, gavel_rounds=gavel_rounds, substeps=substeps)
    if explore_contention is not None:
        config = replace(config, explore_contention=explore_contention)
    table = _colocation(colocation)
    _check_belief_table(belief)
    cluster_obj = load_cluster(cluster)
    work = read_workload(workload)
    from scheduler.formats.profiles import check_workload
    from scheduler.formats.shared_data import default_profiles_dir

    check_workload(work.jobs, cluster_obj, profiles or default_profiles_dir(), work.source)
    with _progress_bar(f"{spec.name} on {work.name}", len(work), hidden=as_json) as on_round:
        result = simulate(cluster_obj, work, spec.name, colocation=table, profiles=profiles,
                          config=config, progress=on_round, policy_options=options)
    if out is not None:
        result.write(out)
    if as_json:
        print(json_text(result.to_json()))
        return
    _print_summary(result, f"{spec.name} · {work.name} · {cluster_obj.total_gpus} GPUs", out)
