"""``colocate token create|list|revoke``: bearer tokens for ``--server`` (an admin's calls, through the server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from colocate import cli_kit
from colocate.commands.jobs import SERVER_HELP, STATE_HELP

if TYPE_CHECKING:
    from scheduler.service.front.remote import ApiClient

token_app = cli_kit.App(help="Bearer tokens for callers on other machines (admins only; see docs/multi-user.md).",
                        no_args_is_help=True)


def register(app: cli_kit.App) -> None:
    app.add_command(token_app, "token")


def _client(state: Path | None, server: str | None) -> ApiClient:
    from common.errors import InputError
    from scheduler.service.front.remote import connect

    client = connect(state, server)
    if client is None:
        raise InputError("no colocate serve answers on its socket", source=state, field="--state",
                         valid="a state directory whose server runs (colocate serve --state)")
    return client


def _duration(text: str | None) -> float | None:
    """``90d``, ``12h``, ``30m`` or seconds as seconds (None: no expiry)."""
    from common.errors import InputError

    if text is None:
        return None
    units = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1.0)
    try:
        return float(number) * unit
    except ValueError:
        raise InputError(f"{text[:40]!r}", field="--expires", valid="a duration: 90d, 12h, 30m or seconds") from None


@token_app.command("create")
def create(user: str = cli_kit.Argument(..., metavar="USER", help="The user the token acts as."),
           expires: str = cli_kit.Option(None, "--expires", help="Valid for this long: 90d, 12h, 30m or seconds.",
                                       show_default="until revoked"),
           state: Path = cli_kit.Option(None, "--state", help=STATE_HELP, readable=False),
           server: str = cli_kit.Option(None, "--server", help=SERVER_HELP, show_default=False)) -> None:
    """Create a token for USER and print it once (only its salted hash is kept)."""
    made = _client(state, server).call("token-create", {"user": user, "expires_s": _duration(expires)})
    cli_kit.echo(made["token"])
    cli_kit.echo(f"token {made['id']} for {made['user']}: shown once; store it in ~/.config/colocate/token (chmod 600) "
               "or COLOCATE_TOKEN", err=True)


@token_app.command("list")
def list_tokens(state: Path = cli_kit.Option(None, "--state", help=STATE_HELP, readable=False),
                server: str = cli_kit.Option(None, "--server", help=SERVER_HELP, show_default=False)) -> None:
    """List the tokens: ID, user, created, expires, revoked (never a secret)."""
    cli_kit.echo(json.dumps(_client(state, server).call("token-list")["tokens"], indent=2))


@token_app.command("revoke")
def revoke(token_id: str = cli_kit.Argument(..., metavar="ID", help="The token's ID (colocate token list)."),
           state: Path = cli_kit.Option(None, "--state", help=STATE_HELP, readable=False),
           server: str = cli_kit.Option(None, "--server", help=SERVER_HELP, show_default=False)) -> None:
    """Revoke a token at once: every later call with it gets 401."""
    done = _client(state, server).call("token-revoke", {"id": token_id})
    cli_kit.echo(f"token {done['id']} of {done['user']}: revoked")
