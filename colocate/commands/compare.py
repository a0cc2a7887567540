"""``colocate compare``: every policy on every workload at every load point, in parallel processes, then a
markdown report (with JCT across load when several load points are given). The work is
:func:`scheduler.sim.compare.compare_policies`; this module parses the options, shows progress and prints."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import typer

__all__ = ["compare_command", "register"]


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_command)


@contextmanager
def _progress_bar(description: str, total: int, completed: int) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A Rich progress bar on stderr; yields the function that advances it by one finished run."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from colocate.commands._output import error_console

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("{task.fields[last]}"), console=error_console)
    with progress:
        bar = progress.add_task(description, total=total, completed=completed, last="")

        def done(row: dict[str, Any]) -> None:
            last = ("FAILED (see the report)" if "error" in row else f"avg JCT {row['avg_jct_s'] / 3600:.2f} h")
            progress.update(bar, advance=1, last=f"{row['workload']}/{row['policy']}: {last}")

        yield done


def compare_command(
    cluster: Path = typer.Option(..., "--cluster", help="Cluster YAML."),
    workloads: str = typer.Option(..., "--workloads", help="Glob of workload files (comma-separate several globs)."),
    policies: str = typer.Option("colocate,sia,gavel", "--policies", help="Comma-separated policy names."),
    loads: str = typer.Option("1", "--loads", help="Load points: multiples of each workload's arrival rate "
                                                  "(arrival times divided by it), e.g. 0.5,1,1.5,2,3."),
    strength: float = typer.Option(1.0, "--colocation-strength",
                                   help="Scale every pair's benefit Σr−1 (sensitivity: <1 weaker, >1 stronger)."),
    out: Path = typer.Option(..., "--out", "-o", help="Report directory, e.g. results/sim/NAME."),
    colocation: Path = typer.Option(None, "--colocation",
                                    help="Colocation table CSV (default: the bundled tables, transferred from Gavel and "
                                         "measured on the H100 under MPS)."),
    round_s: float = typer.Option(60.0, "--round", help="Round length in seconds."),
    seed: int = typer.Option(0, "--seed", help="Seed for randomised policies."),
    workers: Optional[int] = typer.Option(None, "--workers",
                                          help="Worker processes (default: CPU cores, at most the runs)."),
    profiles: Path = typer.Option(None, "--profiles", help="Throughput profiles (default: <shared data>/sia/traces)."),
    title: str = typer.Option(None, "--title", help="Report title."),
    notes: Path = typer.Option(None, "--notes", help="Markdown file appended to the report as its Analysis section."),
    force: bool = typer.Option(False, "--force", help="Rerun simulations whose results already exist in --out."),
    targets: bool = typer.Option(False, "--targets", help="Check the project's JCT targets (colocate vs sia and "
                                 "gavel) in the report."),
) -> None:
    """Run the policies on every workload (in parallel processes) and write report.md, summary.csv and plots."""
    from colocate.commands._output import console
    from scheduler.sim.compare import CompareRequest, compare_policies

    request = CompareRequest(cluster=cluster, workloads=workloads, policies=policies, out=out, loads=loads,
                             strength=strength, colocation=colocation, round_s=round_s, seed=seed, workers=workers,
                             profiles=profiles, title=title, notes=notes, force=force,
                             targets=targets)
    from colocate.commands._output import error_console
    from scheduler.sim.compare import SimulationFailed

    try:
        report, means, failed = compare_policies(request, progress=_progress_bar)
    except SimulationFailed as err:
        error_console.print(f"[red]error:[/] {err}", highlight=False)
        raise typer.Exit(1) from None
    for (load, policy), row in means.iterrows():
        console.print(f"{load:>4g}× {policy:>13}: avg JCT {row.avg_jct_s / 3600:.3f} h · p99 {row.p99_jct_s / 3600:.2f} h"
                      f" · {row.gpu_hours:.0f} GPU-h · packed {row.packed_fraction:.1%}"
                      + (f" (triples {row.triple_fraction:.1%})" if row.triple_fraction > 0 else ""), highlight=False)
    console.print(f"report: {report}")
    for line in failed:
        error_console.print(f"[red]failed:[/] {line}", highlight=False)
    if failed:
        raise typer.Exit(1)
