"""``colocate submit --state DIR JOB.yaml...``: queue jobs with a running (or future) ``colocate serve``."""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.cli_config import input_option
from colocate.commands.jobs import SERVER_HELP, STATE_HELP


def register(app: cli_kit.App) -> None:
    app.command("submit")(submit)


def submit(
    job_files: list[Path] = cli_kit.Argument(..., metavar="JOB.yaml...", help="Job files (see the README: model or "
                                           "command, steps or samples, batch size, GPUs, adaptive); several are "
                                           "validated first, then queued in order."),
    state: Path = cli_kit.Option(None, "--state", help=STATE_HELP, readable=False),
    server: str = cli_kit.Option(None, "--server", help=SERVER_HELP, show_default=False),
    cluster: Path = input_option("cluster", show_default="the cluster the last colocate serve on --state recorded"),
) -> None:
    """Queue jobs (owned by you); prints each one's name. A job the cluster (--cluster: the one to check the job
    against) can never run is refused with the reason, and a bad file queues none of them."""
    from scheduler.service.front.client import submit_jobs

    for name in submit_jobs(job_files, state, cluster, server):
        cli_kit.echo(name)
