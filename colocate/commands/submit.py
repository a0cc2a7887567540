"""``colocate submit --state DIR JOB.yaml``: queue a job with a running (or future) ``colocate serve``."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("submit")(submit)


def submit(
    job_file: Path = typer.Argument(..., metavar="JOB.yaml", help="Job file (see the README: model or command, steps "
                                                                  "or samples, batch size, GPUs, adaptive)."),
    state: Path = typer.Option(..., "--state", help="State directory of the scheduler."),
) -> None:
    """Queue a job; prints its name."""
    from scheduler.service.jobspec import load_job
    from scheduler.service.state import StateStore

    spec = load_job(job_file)
    typer.echo(StateStore(state).submit(spec, source=str(job_file)))
