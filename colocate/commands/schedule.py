"""``colocate schedule``: one scheduling round — GPU type, GPU count, batch size and partner for every job.

Reads a cluster YAML, a jobs CSV, throughput profiles (a generic CSV or Sia's traces directory) and an
optional colocation table; builds and solves the round ILP (:mod:`scheduler.ilp`); places the result on
concrete nodes and GPUs (:mod:`scheduler.model.placement`); prints a table and the solver line, or JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from colocate import cli_kit
from colocate.cli_config import ConfigSpec, config_command, input_option, printed_config
from common.errors import InputError
from scheduler.formats.allocation_file import allocation_document as decision_to_json
from scheduler.formats.profiles import load_goodput_model
from scheduler.ilp.config import IlpConfig


def register(app: cli_kit.App) -> None:
    app.command("schedule")(schedule)


def default_profiles_path(gpu_types: tuple[str, ...] = ()) -> Path | None:
    """Sia's traces (``$COLOCATE_SHARED_DATA/sia/traces`` or ``../shared/data`` beside us) if present, else the
    bundled profiles (also for a cluster of only bundled types)."""
    from scheduler.formats.shared_data import default_profiles_dir

    candidate = default_profiles_dir(gpu_types)
    return candidate if candidate.is_dir() else None


def _check_inputs(jobs: list, cluster: Any, model: Any, jobs_path: Path) -> None:
    """Catch typos that would silently leave jobs unallocated: unknown applications and GPU types, and jobs
    no configuration of the cluster can run (too many GPUs, or a batch outside every profile)."""
    from colocate.commands._output import error_console
    from scheduler.model.configs import configurations

    known = model.applications
    configs = configurations(cluster)
    largest = max(t.total_gpus for t in cluster)
    if known is not None:
        for name in cluster.type_names:
            if not any(name in (model.gpu_types(app) or ()) for app in {j.application for j in jobs} & known):
                error_console.print(f"warning: GPU type {name!r} of the cluster has no throughput profile for "
                                    f"these jobs' applications; its GPUs stay idle", highlight=False)
    for row, job in enumerate(jobs, start=2):
        if job.num_gpus > largest:
            raise InputError(f"row {row}: job {job.name!r} asks for {job.num_gpus} GPUs; the largest GPU type of "
                             f"the cluster has {largest}", source=jobs_path, field="num_gpus",
                             valid=f"an integer in [1, {largest}]")
        if known is not None and job.application not in known:
            raise InputError(f"row {row}: no throughput profile for application {job.application!r}",
                             source=jobs_path, field="application", valid=", ".join(sorted(known)))
        if job.current_gpu_type and job.current_gpu_type not in cluster:
            raise InputError(f"row {row}: current_gpu_type {job.current_gpu_type!r} is not in the cluster",
                             source=jobs_path, field="current_gpu_type", valid=", ".join(cluster.type_names))
        shapes = [c for c in configs if job.adaptive or c.num_gpus == job.num_gpus]
        if known is not None and not any(e is not None for e in model.estimate_many(job, shapes)):
            field = "batch_size" if job.batch_size and shapes else "num_gpus"
            raise InputError(f"row {row}: job {job.name!r} ({job.num_gpus} GPUs, batch {job.batch_size or 'auto'}) "
                             f"fits no configuration of the cluster with the given profiles", source=jobs_path,
                             field=field, valid="a GPU count and batch size the profiles cover on some GPU type")


ILP_SPEC = ConfigSpec("ilp", IlpConfig, panel="Round ILP")


@config_command(ILP_SPEC)
def schedule(
    cluster: Path = input_option("cluster", ...),
    jobs: Path = cli_kit.Option(..., "--jobs", help="Jobs CSV (name,application[,num_gpus,adaptive,...])."),
    profiles: Optional[Path] = input_option("profiles", show_default="Sia's traces in the shared data, else the "
                                                                     "bundled profiles"),
    colocation: Optional[Path] = input_option("colocation", show_default="the bundled tables, as simulate; --no-packing: none"),
    as_json: bool = input_option("as_json", False),
    *,
    ilp: IlpConfig,
) -> None:
    """Decide one round: GPU type, GPU count, batch size and co-location partner for every job."""
    from scheduler.ilp.policy import PackingPolicy
    from scheduler.model.cluster import load_cluster
    from scheduler.model.jobs import load_jobs
    from scheduler.model.placement import place
    from scheduler.model.policy import RoundContext

    the_cluster = load_cluster(cluster)
    the_jobs = load_jobs(jobs)
    if profiles is None:
        profiles = default_profiles_path(the_cluster.type_names)
        if profiles is None:
            raise InputError("no throughput profiles given, and neither Sia's traces nor bundled profiles cover "
                             "this cluster's GPU types",
                             field="--profiles", valid="a profile CSV or Sia's traces directory")
    model = load_goodput_model(profiles)
    _check_inputs(the_jobs, the_cluster, model, jobs)
    # the same default as simulate: packing means the bundled pair ratios when none are given
    from colocate.analysis.matrix import read_colocation
    from scheduler.formats.transfer import default_table

    table = (read_colocation(colocation) if colocation is not None
             else default_table() if ilp.packing else None)
    policy = PackingPolicy(ilp, name="colocate" if ilp.packing else "sia")
    decision = policy.allocate(the_jobs, the_cluster, RoundContext(goodput=model, colocation=table))
    placement = place(decision, the_cluster)
    if as_json:
        from common.safe_load import json_text

        # the round's settings beside the decision: --set @FILE loads them again (colocate.config_file)
        printed = {**decision_to_json(decision, placement), "config": printed_config([ILP_SPEC], {"ilp": ilp})}
        cli_kit.echo(json_text(printed, indent=2))
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
        table.add_row(a.job, a.gpu_type, str(a.num_gpus), str(a.batch_size), ", ".join(a.others), node, gpus,
                      f"{a.expected_goodput:,.1f}")
    console.print(table)
    if decision.unallocated:
        console.print(f"[yellow]unallocated ({len(decision.unallocated)}):[/] {', '.join(decision.unallocated)}")
    if placement.unplaced:
        console.print(f"[red]allocated but not placeable:[/] {', '.join(placement.unplaced)}")
    pairs = sum(1 for a in decision.allocations if a.partner and not a.partners) // 2
    triples = sum(1 for a in decision.allocations if a.partners) // 3
    console.print(f"{len(decision.allocations)} jobs allocated, {pairs} packed pairs, {triples} groups of three, "
                  f"{len(decision.unallocated)} unallocated")
    console.print(solver_line(decision.solver), highlight=False)
