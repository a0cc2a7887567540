"""``colocate submit --state DIR JOB.yaml...``: queue jobs with a running (or future) ``colocate serve``."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("submit")(submit)


def submit(
    job_files: list[Path] = typer.Argument(..., metavar="JOB.yaml...", help="Job files (see the README: model or "
                                           "command, steps or samples, batch size, GPUs, adaptive); several are "
                                           "validated first, then queued in order."),
    state: Path = typer.Option(..., "--state", help="State directory of the scheduler."),
) -> None:
    """Queue jobs; prints each one's name."""
    from scheduler.service.jobspec import load_job
    from scheduler.service.state import StateStore

    specs = [(load_job(path), path) for path in job_files]  # a bad file queues none of them
    store = StateStore(state)
    for spec, path in specs:
        typer.echo(store.submit(spec, source=str(path)))
