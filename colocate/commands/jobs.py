"""``colocate jobs --state DIR [--json] [--watch]``: every job's state, GPUs, batch, partner, progress, throughput."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer


def register(app: typer.Typer) -> None:
    app.command("jobs")(jobs)


def _table(rows: list[dict[str, Any]], meta: str) -> Any:
    from rich.table import Table

    table = Table(title=f"jobs · {meta}")
    for column in ("job", "state", "GPU type", "GPUs", "batch", "partner", "progress", "samples/s", "restarts",
                   "crashes", "why waiting / error"):
        table.add_column(column, overflow="fold")
    for r in rows:
        progress = f"{r['step'] if r['target_unit'] == 'steps' else r['samples']}/{r['target']} {r['target_unit']}"
        table.add_row(r["name"], r["state"], r["gpu_type"] or "", str(r["num_gpus"] or ""), str(r["batch_size"] or ""),
                      r["partner"] or "", progress, f"{r['samples_per_s']:.1f}" if r["samples_per_s"] else "",
                      str(r["restarts"]), str(r["crashes"]), _why(r))
    return table


def _why(row: dict[str, Any]) -> str:
    """A queued job's reason to wait (the last round's), else its last error."""
    waiting = row.get("waiting")
    if waiting:
        return f"{waiting['code']}: {waiting['text']}"
    return str(row["error"])[:80]


def jobs(
    state: Path = typer.Option(..., "--state", help="State directory of the scheduler."),
    as_json: bool = typer.Option(False, "--json", help="JSON: jobs and the learned tables."),
    watch: bool = typer.Option(False, "--watch", help="Refresh every 2 s until Ctrl-C."),
) -> None:
    """Show every job of a scheduler instance."""
    from scheduler.service.store import StateStore
    from scheduler.service.views import job_views, learned_view

    store = StateStore(state, create=False, readonly=True)
    if as_json:  # scripts poll this: no Rich console (its module imports pandas)
        typer.echo(json.dumps({"jobs": job_views(store), "learned": learned_view(store),
                               "rounds": int(store.meta("rounds") or 0)}, indent=2))
        return
    from colocate.commands._output import console

    def render() -> Any:
        if not (state / "state.db").exists():  # a directory no server or submit has used (yet): say so
            return _table([], f"none: {state} has no state.db yet (colocate serve or submit creates it)")
        return _table(job_views(store), f"{store.meta('rounds') or 0} rounds · last {store.meta('last_round') or '-'}")

    if not watch:
        console.print(render())
        return
    from rich.live import Live

    try:
        with Live(render(), console=console, refresh_per_second=1) as live:
            while True:
                time.sleep(2.0)
                live.update(render())
    except KeyboardInterrupt:
        pass
