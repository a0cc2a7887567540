"""``colocate state check --state DIR``: is a state database sound? (read-only; creates nothing)."""

from __future__ import annotations

import json
from pathlib import Path

from colocate import cli_kit
from colocate.commands.jobs import SERVER_HELP

state_app = cli_kit.App(help="Inspect a scheduler state directory (see docs/hardening.md for recovery).",
                        no_args_is_help=True)


def register(app: cli_kit.App) -> None:
    app.add_command(state_app, "state")


@state_app.command("check")
def check(state: Path = cli_kit.Option(None, "--state", readable=False, help="State directory (or a copy of one); through its "
                                     "server's socket when one runs (an admin's call)."),
          server: str = cli_kit.Option(None, "--server", help=SERVER_HELP, show_default=False)) -> None:
    """Check the database read-only: SQLite integrity, schema version and columns, every job's spec, every row.
    Exit 2 if it cannot be used, 1 if some jobs' specs are invalid (the server fails those jobs) or some rows are
    damaged (listed under set_aside: the server leaves them out) or the server's rounds are failing (round_failures:
    in_a_row > 0, the last error), 0 if sound."""
    from scheduler.service.front.client import check_state

    summary = check_state(state, server)
    cli_kit.echo(json.dumps(summary, indent=2))  # ASCII JSON: a row's text cannot reach the terminal raw
    if summary["invalid"] or summary["set_aside"] or summary["round_failures"]["in_a_row"]:
        raise cli_kit.Exit(1)
