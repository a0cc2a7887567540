"""Shared Rich output helpers for commands: one console, the campaign progress bar, the summary table."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from colocate.analysis.summary import format_ci

console = Console()
if not console.is_terminal:  # piped or captured: don't squeeze tables into 80 columns
    console = Console(width=160)
error_console = Console(stderr=True)


@contextmanager
def campaign_progress(description: str, *, enabled: bool = True) -> Iterator[Any]:
    """A progress bar (runs done / total, ETA, last δ) that the campaign's on_progress callback feeds."""
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[last]}"),
        console=error_console, disable=not enabled, transient=False,
    )
    with progress:
        task = progress.add_task(description, total=None, last="")

        def update(event: Any) -> None:
            last = ""
            if event.record is not None:
                row = event.record.run
                value = row.get("delta")
                if row["status"] != "ok":
                    last = f"{row['job_types']}: {row['status']}"
                elif value is not None and not (isinstance(value, float) and math.isnan(value)):
                    last = f"{row['job_types']} δ={value:.3f}"
                else:
                    last = f"{row['job_types']} solo"
            progress.update(task, total=event.total, completed=event.done, last=last)

        yield update


def summary_table(summary: pd.DataFrame, title: str) -> Table:
    table = Table(title=title, show_lines=False)
    several_types = "gpu_type" in summary and summary["gpu_type"].nunique() > 1
    if several_types:
        table.add_column("GPU type")
    for column in ("cell", "mode", "ok/runs", "δ (95% CI)", "Σ t/t′", "slowdowns t′/t", "solo t (s)", "note"):
        table.add_column(column, overflow="fold")
    for row in summary.itertuples():
        slow = "/".join(f"{s:.2f}" for s in row.slowdowns) if row.kind != "solo" and row.slowdowns else ""
        table.add_row(
            *([str(row.gpu_type)] if several_types else []),
            row.job_types, row.mode, f"{row.ok}/{row.repeats}",
            format_ci(row.delta, row.delta_ci) if row.kind != "solo" else "",
            format_ci(row.throughput_sum, row.throughput_sum_ci) if row.kind != "solo" else "",
            slow,
            format_ci(row.solo_iter_time_s, row.solo_iter_time_ci, 4) if row.kind == "solo" else "",
            "" if row.status == "ok" else f"{row.status}: {row.error}",
        )
    return table
