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
    cluster: Path = typer.Option(None, "--cluster", help="Cluster YAML to check the job against [default: the "
                                                         "cluster the last colocate serve on --state recorded]."),
) -> None:
    """Queue a job; prints its name. A job the cluster can never run is refused with the reason."""
    from scheduler.service.client import submit_job

    typer.echo(submit_job(job_file, state, cluster))
