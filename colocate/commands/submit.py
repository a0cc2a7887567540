"""``colocate submit --state DIR JOB.yaml...``: queue jobs with a running (or future) ``colocate serve``."""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.cli_config import input_option


def register(app: cli_kit.App) -> None:
    app.command("submit")(submit)


def submit(
    job_files: list[Path] = cli_kit.Argument(..., metavar="JOB.yaml...", help="Job files (see the README: model or "
                                           "command, steps or samples, batch size, GPUs, adaptive); several are "
                                           "validated first, then queued in order."),
    state: Path = cli_kit.Option(..., "--state", help="State directory of the scheduler."),
    cluster: Path = input_option("cluster", show_default="the cluster the last colocate serve on --state recorded"),
) -> None:
    """Queue jobs; prints each one's name. A job the cluster can never run is refused with the reason, and a bad
    file queues none of them."""
    from scheduler.service.front.client import submit_jobs

    for name in submit_jobs(job_files, state, cluster):
        cli_kit.echo(name)
