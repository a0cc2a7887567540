"""``colocate compare``: every policy on every workload at every load point, in parallel processes, then a
markdown report (with JCT across load when several load points are given). The work is
:func:`scheduler.sim.compare.compare_policies`; this module parses the options, shows progress and prints."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from colocate import cli_kit
from colocate.cli_config import ConfigSpec, Defaults, config_command, entries, printed_config
from colocate.commands.simulate import policy_ilp
from scheduler.ilp.config import IlpConfig
from scheduler.sim.compare import CompareRequest, run_name
from scheduler.sim.config import SimConfig

__all__ = ["compare_command", "register", "write_config"]


def register(app: cli_kit.App) -> None:
    app.command("compare")(compare_command)


def _last(row: dict[str, Any]) -> str:
    return "FAILED (see the report)" if "error" in row else f"avg JCT {row['avg_jct_s'] / 3600:.2f} h"


def _run_name(row: dict[str, Any]) -> str:
    """``workload[ rK]/policy``: which run finished."""
    return f"{run_name(row['workload'], row.get('replicate', 0))}/{row['policy']}"


@contextmanager
def _progress_bar(description: str, total: int, completed: int) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A Rich progress bar on stderr; yields the function that advances it by one finished run."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from colocate.commands._output import error_console

    if not error_console.is_terminal:  # a log file or a pipe: whole lines, never a bar cut at a guessed width
        error_console.print(f"{description}: {completed}/{total} done", soft_wrap=True, highlight=False)
        count = [completed]

        def line(row: dict[str, Any]) -> None:
            count[0] += 1
            error_console.print(f"{count[0]}/{total} {_run_name(row)}: {_last(row)}",
                                soft_wrap=True, highlight=False)

        yield line
        return
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("{task.fields[last]}"), console=error_console)
    with progress:
        bar = progress.add_task(description, total=total, completed=completed, last="")

        def done(row: dict[str, Any]) -> None:
            progress.update(bar, advance=1, last=f"{_run_name(row)}: {_last(row)}")

        yield done


def _policies_ilp(built: IlpConfig, others: dict[str, Any]) -> Defaults:
    """Each compared ILP policy's own settings (names the request refuses later are left out here)."""
    from scheduler.policies import POLICIES

    names = [p.strip().lower() for p in others["request"].policies.split(",")]
    return policy_ilp([n for n in names if n in POLICIES])


REQUEST_SPEC = ConfigSpec("request", CompareRequest, panel="Comparison")
SIM_SPEC = ConfigSpec("sim", SimConfig, panel="Simulator")
ILP_SPEC = ConfigSpec("ilp", IlpConfig, flags=(), panel="Round ILP (colocate, sia)", defaults=_policies_ilp)
CONFIG_FILE = "config.json"


def write_config(request: CompareRequest) -> Path:
    """The settings the comparison ran with, beside its report: ``config`` (the request, the simulator's settings
    and the ILP settings given over each policy's own: what ``--set @FILE`` runs again, as a ``simulate --json``
    output's) and ``ilp_of_policy`` (each compared policy's whole round-ILP settings; None: it solves none)."""
    from colocate.config_file import config_json
    from common.files import atomic_write_json
    from scheduler.policies import policy_spec
    from scheduler.sim.compare import ilp_changes

    changed = ilp_changes(request)
    given = [e for e in entries(ILP_SPEC) if e.path[0] in changed]
    config = {**printed_config((REQUEST_SPEC, SIM_SPEC), {"request": request, "sim": request.sim}),
              **config_json({"ilp": (given, next(iter(request.ilp.values()), None))})}
    names = [policy_spec(p).name for p in request.policies.split(",") if p.strip()]
    per_policy = {name: printed_config([ILP_SPEC], {"ilp": request.ilp.get(name)})["ilp"] for name in names}
    return atomic_write_json({"config": config, "ilp_of_policy": per_policy}, request.out / CONFIG_FILE)


@config_command(REQUEST_SPEC, SIM_SPEC, ILP_SPEC)
def compare_command(*, request: CompareRequest, sim: SimConfig, ilp: dict[str, IlpConfig]) -> None:
    """Run the policies on every workload (in parallel processes) and write report.md, summary.csv and plots
    (--out: the report directory, e.g. results/sim/NAME)."""
    from colocate.commands._output import console, error_console
    from scheduler.sim.compare import SimulationFailed, compare_policies

    request = replace(request, sim=sim, ilp=ilp)
    if request.colocation is not None and request.colocation.is_dir():
        from colocate.analysis.matrix import measured_pairs

        request = replace(request, colocation_rows=measured_pairs(request.colocation))
    try:
        report, means, failed = compare_policies(request, progress=_progress_bar)
    except SimulationFailed as err:
        error_console.print(f"[red]error:[/] {err}", highlight=False)
        raise cli_kit.Exit(1) from None
    for (load, policy), row in means.iterrows():
        console.print(f"{load:>4g}× {policy:>13}: avg JCT {row.avg_jct_s / 3600:.3f} h · p99 {row.p99_jct_s / 3600:.2f} h"
                      f" · {row.gpu_hours:.0f} GPU-h · packed {row.packed_fraction:.1%}"
                      + (f" (triples {row.triple_fraction:.1%})" if row.triple_fraction > 0 else ""), highlight=False)
    console.print(f"report: {report}")
    console.print(f"config: {write_config(request)} (--set @FILE loads its settings again)", highlight=False,
                  soft_wrap=True)
    for line in failed:
        error_console.print(f"[red]failed:[/] {line}", highlight=False)
    if failed:
        raise cli_kit.Exit(1)
