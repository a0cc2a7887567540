"""``colocate simulate``: run one policy over one workload in the trace-driven cluster simulator."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from colocate import cli_kit
from colocate.cli_config import ConfigSpec, Defaults, config_command, input_option, printed_config
from scheduler.ilp.config import IlpConfig
from scheduler.learning.belief import BeliefSpec
from scheduler.policies import ILP_POLICY_NAMES, PolicyChoice
from scheduler.sim.config import SimConfig

ILP_VALID = ("--policy " + ", ".join(ILP_POLICY_NAMES) + " (the policies that solve the round ILP)")


def policy_ilp(names: Sequence[str]) -> Defaults:
    """The round-ILP settings' defaults of a run of ``names``: each ILP policy's own (the registry's); the user's
    values apply over them, and none may be given when no policy solves the ILP."""
    from scheduler.policies import PINNED, policy_spec

    specs = [policy_spec(n) for n in names]
    return Defaults({s.name: s.ilp for s in specs if s.ilp is not None},
                    why="--polic" + ("y " if len(specs) == 1 else "ies ") + ",".join(s.name for s in specs),
                    valid=ILP_VALID, pinned={f: PINNED[f] for s in specs for f in s.pinned})


RUN_SPEC = ConfigSpec("run", PolicyChoice)
SIM_SPEC = ConfigSpec("sim", SimConfig, panel="Simulator")
ILP_SPEC = ConfigSpec("ilp", IlpConfig, flags=("max_group_size", "max_slowdown"), panel="Round ILP (colocate, sia)",
                      defaults=lambda built, others: policy_ilp([others["run"].policy]))


def register(app: cli_kit.App) -> None:
    app.command("simulate")(simulate_command)


def _hours(seconds: float) -> str:
    return "–" if not math.isfinite(seconds) else f"{seconds / 3600:.2f} h"


def _check_belief_table(spec: BeliefSpec) -> None:
    """``--belief table:FILE``: the file read once before the simulation starts, so a bad one is a one-line
    error before any progress (the simulator reads it again as its prior)."""
    from scheduler.learning.belief import read_belief_table

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
        ("packed fraction", f"{s['packed_fraction']:.1%}"),
        ("worst slowdown in a group", f"{s['worst_slowdown']:.2f}×"),
        ("job-time above its bound", f"{s['over_bound_fraction']:.1%}"), ("wall time", f"{s['wall_s']:.1f} s"),
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


@config_command(RUN_SPEC, SIM_SPEC, ILP_SPEC)
def simulate_command(
    cluster: Path = input_option("cluster", ...),
    workload: Path = cli_kit.Option(..., "--workload", help="Sia/Pollux workload CSV, Gavel .trace or Philly job CSV."),
    colocation: Path = input_option("colocation", show_default="packing policies: the bundled tables (transferred "
                                                               "from Gavel's measurements, and the pairs measured "
                                                               "on the H100 under MPS)"),
    profiles: Path = input_option("profiles", show_default="<shared data>/sia/traces"),
    out: Path = input_option("out"),
    as_json: bool = input_option("as_json", False),
    *,
    run: PolicyChoice,
    sim: SimConfig,
    ilp: dict[str, IlpConfig],
) -> None:
    """Simulate a workload under one policy; print JCTs, makespan, GPU-hours, utilization, packing (--out: a
    directory for jobs/rounds/allocations Parquet + summary.json)."""
    from common.safe_load import json_text
    from profiler.campaign.outdir import check_out_dir, prepare_out_dir
    from scheduler.formats.profiles import check_workload
    from scheduler.formats.shared_data import default_profiles_dir
    from scheduler.formats.workloads import read_workload
    from scheduler.model.cluster import load_cluster
    from scheduler.sim.simulator import simulate

    spec = run.spec
    the_ilp = ilp.get(spec.name)
    from colocate.analysis.matrix import read_colocation

    table = read_colocation(colocation)
    _check_belief_table(sim.belief)
    cluster_obj = load_cluster(cluster)
    work = read_workload(workload)
    check_workload(work.jobs, cluster_obj, profiles or default_profiles_dir(), work.source)
    if out is not None:  # refused now, created only once the simulation is done: a refusal inside it (profiles
        check_out_dir(out)  # it cannot read) leaves no directory behind
    with _progress_bar(f"{spec.name} on {work.name}", len(work), hidden=as_json) as on_round:
        result = simulate(cluster_obj, work, spec.name, colocation=table, profiles=profiles,
                          config=sim, progress=on_round, ilp=the_ilp)
    if out is not None:
        result.write(prepare_out_dir(out))
    if as_json:
        configs = {"run": run, "sim": sim, "ilp": the_ilp}
        print(json_text({**result.to_json(), "config": printed_config((RUN_SPEC, SIM_SPEC, ILP_SPEC), configs)}))
        return
    _print_summary(result, f"{spec.name} · {work.name} · {cluster_obj.total_gpus} GPUs", out)
