"""``colocate cancel --state DIR NAME``: stop a job (the server stops it next round) or drop it from the queue."""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.commands.jobs import SERVER_HELP, STATE_HELP


def register(app: cli_kit.App) -> None:
    app.command("cancel")(cancel)


def cancel(
    name: str = cli_kit.Argument(..., metavar="NAME", help="Job name, as printed by colocate submit."),
    state: Path = cli_kit.Option(None, "--state", help=STATE_HELP, readable=False),
    server: str = cli_kit.Option(None, "--server", help=SERVER_HELP, show_default=False),
) -> None:
    """Cancel a job (yours; an admin may cancel any)."""
    from scheduler.service.front.client import cancel_job

    previous = cancel_job(state, name, server)
    cli_kit.echo(f"{name}: {'already ' + previous if previous in ('completed', 'failed', 'cancelled') else 'cancel requested'}")
