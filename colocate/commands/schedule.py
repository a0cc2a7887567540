"""``colocate schedule``: one scheduling round — GPU type, GPU count, batch size and partner for every job.

Reads a cluster YAML, a jobs CSV, throughput profiles (a generic CSV or Sia's traces directory) and an
optional colocation table; builds and solves the round ILP (:mod:`scheduler.ilp`); places the result on
concrete nodes and GPUs (:mod:`scheduler.placement`); prints a table and the solver line, or JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from colocate.errors import InputError


def register(app: typer.Typer) -> None:
    app.command("schedule")(schedule)


def default_profiles_path(gpu_types: tuple[str, ...] = ()) -> Path | None:
    """Sia's traces (``$COLOCATE_SHARED_DATA/sia/traces`` or ``../shared/data`` beside us) if present, else the
    bundled profiles (also for a cluster of only bundled types)."""
    from scheduler.workloads import default_profiles_dir

    candidate = default_profiles_dir(gpu_types)
    return candidate if candidate.is_dir() else None


def _check_inputs(jobs: list, cluster: Any, model: Any, jobs_path: Path) -> None:
    """Catch typos that would silently leave jobs unallocated: unknown applications and GPU types."""
    known = getattr(model, "applications", None)
    for row, job in enumerate(jobs, start=2):
        if known is not None and job.application not in known:
            raise InputError(f"row {row}: no throughput profile for application {job.application!r}",
                             source=jobs_path, field="application", valid=", ".join(sorted(known)))
        if job.current_gpu_type and job.current_gpu_type not in cluster:
            raise InputError(f"row {row}: current_gpu_type {job.current_gpu_type!r} is not in the cluster",
                             source=jobs_path, field="current_gpu_type", valid=", ".join(cluster.type_names))


def decision_to_json(decision: Any, placement: Any) -> dict[str, Any]:
    """The ``--json`` document (schema in the README)."""
    rows = []
    for a in decision.allocations:
        where = placement.of(a.job)
        rows.append({
            "job": a.job, "gpu_type": a.gpu_type, "num_gpus": a.num_gpus, "batch_size": a.batch_size,
            "partner": a.partner, "node": where.node if where else None,
            "nodes": list(where.nodes) if where else [], "gpus": list(where.gpus) if where else [],
            "expected_goodput": round(a.expected_goodput, 6),
        })
    info = decision.solver
    return {
        "allocations": rows,
        "unallocated": list(decision.unallocated),
        "unplaced": list(placement.unplaced),
        "objective": info.objective,
        "solver": {"name": info.name, "status": info.status, "time_s": round(info.time_s, 4), "gap": info.gap,
                   "bound": info.bound, "fallback": info.fallback, "variables": info.num_variables,
                   "constraints": info.num_constraints},
    }


def schedule(
    cluster: Path = typer.Option(..., "--cluster", help="Cluster YAML: gpu_types: {NAME: {nodes, gpus_per_node, memory_gb}}."),
    jobs: Path = typer.Option(..., "--jobs", help="Jobs CSV (name,application[,num_gpus,adaptive,...])."),
    profiles: Optional[Path] = typer.Option(None, "--profiles", help="Throughput profiles: a CSV "
                                            "(application,gpu_type,num_gpus,batch_size,throughput) or Sia's "
                                            "traces directory. Default: ../shared/data/sia/traces."),
    colocation: Optional[Path] = typer.Option(None, "--colocation", help="Colocation table CSV "
                                              "(gpu_type,type_a,type_b,ratio_a,ratio_b). Without it: no packing."),
    p: float = typer.Option(-0.5, "--p", help="Goodput power: -0.5 = Sia (fairness), 1 = sum of normalised goodputs."),
    top_k: int = typer.Option(3, "--top-k", help="Partners considered per job."),
    min_benefit: float = typer.Option(0.05, "--min-benefit", help="A pair needs ratio_a + ratio_b >= 1 + this."),
    time_limit: float = typer.Option(10.0, "--time-limit", help="Solver time limit, seconds."),
    gap: float = typer.Option(0.005, "--gap", help="Relative MIP gap at which the solver stops."),
    restart_cost: float = typer.Option(25.0, "--restart-cost", help="Sia's restart cost S, seconds."),
    solver: str = typer.Option("highs", "--solver", help="highs | pulp-highs | cbc."),
    no_packing: bool = typer.Option(False, "--no-packing", help="No pair variables: exactly Sia's ILP."),
    as_json: bool = typer.Option(False, "--json", help="Print the decision as JSON instead of a table."),
) -> None:
    """Decide one round: GPU type, GPU count, batch size and co-location partner for every job."""
    from scheduler.cluster import load_cluster
    from scheduler.colocation import ColocationTable
    from scheduler.goodput import ProfileGoodputModel
    from scheduler.ilp import IlpConfig, PackingPolicy
    from scheduler.jobs import load_jobs
    from scheduler.placement import place
    from scheduler.policy import RoundContext

    if p == 0:
        raise InputError("p = 0 is not allowed", field="--p", valid="a non-zero number, e.g. -0.5 (Sia) or 1")
    if top_k < 0:
        raise InputError(f"{top_k}", field="--top-k", valid="an integer >= 0")
    if time_limit <= 0:
        raise InputError(f"{time_limit}", field="--time-limit", valid="seconds > 0")
    if not 0 <= gap < 1:
        raise InputError(f"{gap}", field="--gap", valid="a fraction in [0, 1)")
    if solver not in ("highs", "pulp-highs", "cbc"):
        raise InputError(f"unknown solver {solver!r}", field="--solver", valid="highs, pulp-highs, cbc")
    the_cluster = load_cluster(cluster)
    the_jobs = load_jobs(jobs)
    if profiles is None:
        profiles = default_profiles_path(the_cluster.type_names)
        if profiles is None:
            raise InputError("no throughput profiles given and ../shared/data/sia/traces not found",
                             field="--profiles", valid="a profile CSV or Sia's traces directory")
    model = ProfileGoodputModel.from_path(profiles)
    _check_inputs(the_jobs, the_cluster, model, jobs)
    table = ColocationTable.load(colocation) if colocation is not None else None
    config = IlpConfig(p=p, top_k=top_k, min_benefit=min_benefit, time_limit_s=time_limit, mip_gap=gap,
                       restart_cost_s=restart_cost, solver=solver, packing=not no_packing)  # type: ignore[arg-type]
    policy = PackingPolicy(config, name="sia" if no_packing else "colocate")
    decision = policy.allocate(the_jobs, the_cluster, RoundContext(goodput=model, colocation=table))
    placement = place(decision, the_cluster)
    if as_json:
        typer.echo(json.dumps(decision_to_json(decision, placement), indent=2))
        return
    _print_table(decision, placement, the_jobs)


def solver_line(info: Any) -> str:
    """One line: solver, status, objective, bound, gap, time (and the fallback when one was used)."""
    bound = f"{info.bound:.6g}" if info.bound is not None else "n/a"
    gap = f"{100 * info.gap:.3f} %" if info.gap is not None else "n/a"
    line = (f"solver {info.name} · status {info.status} · objective {info.objective:.6g} · bound {bound} · "
            f"gap {gap} · time {info.time_s:.3f} s · {info.num_variables} variables")
    if info.fallback:
        line += f" · used: {info.fallback}"
    return line


def _print_table(decision: Any, placement: Any, jobs: list) -> None:
    from rich.table import Table

    from colocate.commands._output import console
    order = {j.name: n for n, j in enumerate(jobs)}
    table = Table(title="Round decision", show_lines=False)
    for column in ("job", "GPU type", "GPUs", "batch", "partner", "node", "GPU indices", "goodput (samples/s)"):
        table.add_column(column, justify="right" if column in ("GPUs", "batch", "goodput (samples/s)") else "left")
    for a in sorted(decision.allocations, key=lambda x: order.get(x.job, 0)):
        where = placement.of(a.job)
        node = ",".join(str(n) for n in where.nodes) if where else "unplaced"
        gpus = ",".join(str(g) for g in where.gpus) if where else ""
        table.add_row(a.job, a.gpu_type, str(a.num_gpus), str(a.batch_size), a.partner or "", node, gpus,
                      f"{a.expected_goodput:,.1f}")
    console.print(table)
    if decision.unallocated:
        console.print(f"[yellow]unallocated ({len(decision.unallocated)}):[/] {', '.join(decision.unallocated)}")
    if placement.unplaced:
        console.print(f"[red]allocated but not placeable:[/] {', '.join(placement.unplaced)}")
    pairs = sum(1 for a in decision.allocations if a.partner) // 2
    console.print(f"{len(decision.allocations)} jobs allocated, {pairs} packed pairs, "
                  f"{len(decision.unallocated)} unallocated")
    console.print(solver_line(decision.solver), highlight=False)
