"""``colocate logs NAME``: the end of a job's log, through the server (its owner or an admin only)."""

from __future__ import annotations

from pathlib import Path

from colocate import cli_kit
from colocate.commands.jobs import SERVER_HELP, STATE_HELP


def register(app: cli_kit.App) -> None:
    app.command("logs")(logs)


def logs(
    name: str = cli_kit.Argument(..., metavar="NAME", help="Job name, as printed by colocate submit."),
    state: Path = cli_kit.Option(None, "--state", help=STATE_HELP, readable=False),
    server: str = cli_kit.Option(None, "--server", help=SERVER_HELP, show_default=False),
) -> None:
    """Print the last 64 KiB of a job's log (yours; an admin may read any). Needs a running server."""
    from common.errors import InputError
    from common.untrusted import printable
    from scheduler.service.front.remote import connect

    client = connect(state, server)
    if client is None:
        raise InputError("no colocate serve answers on its socket", source=state, field="--state",
                         valid="a state directory whose server runs (colocate serve --state)")
    text = client.call("logs", {"name": name})["log"]
    for line in text.splitlines():
        cli_kit.echo(printable(line))  # a job's log is the job's text: escapes shown, never interpreted
