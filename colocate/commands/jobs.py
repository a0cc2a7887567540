"""``colocate jobs --state DIR [--json] [--watch]``: every job's state, GPUs, batch, partner, progress, throughput."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from colocate import cli_kit
from colocate.cli_config import input_option

STATE_HELP = "State directory of the scheduler (on its machine; through its server's socket when one runs)."
SERVER_HELP = "URL of a colocate serve --api-port (another machine), with a token: COLOCATE_TOKEN or " \
              "~/.config/colocate/token (0600)."


def register(app: cli_kit.App) -> None:
    app.command("jobs")(jobs)


def _table(rows: list[dict[str, Any]], meta: str) -> Any:
    """The jobs as a table (with an owner column when some jobs are not the viewer's): every cell plain text (a
    job's last log line may hold escape sequences or Rich markup; :func:`common.untrusted.printable` shows them as
    escapes and ``Text`` never reads markup)."""
    import os

    from rich.table import Table
    from rich.text import Text

    from common.untrusted import printable

    table = Table(title=Text(f"jobs · {printable(meta)}"))
    # whose each job is, once some are not the viewer's (a single user's table keeps its width)
    owners = {r.get("owner_uid", -1) for r in rows} - {os.geteuid(), -1}
    for column in ("job", *(("owner",) if owners else ()), "state", "GPU type", "GPUs", "batch", "partner", "progress",
                   "samples/s", "slowdown",
                   "restarts", "crashes", "why waiting / not scaled / error"):
        table.add_column(column, overflow="fold")
    for r in rows:
        progress = f"{r['step'] if r['target_unit'] == 'steps' else r['samples']}/{r['target']} {r['target_unit']}"
        cells = (r["name"], *((r.get("owner") or "",) if owners else ()), r["state"], r["gpu_type"] or "",
                 str(r["num_gpus"] or ""), str(r["batch_size"] or ""), r["partner"] or "", progress,
                 f"{r['samples_per_s']:.1f}" if r["samples_per_s"] else "",
                 _slowdown(r), str(r["restarts"]), str(r["crashes"]), _why(r))
        table.add_row(*(Text(printable(cell)) for cell in cells))
    return table


def _server_line(status: dict[str, Any]) -> str:
    """Whether a server updates what is shown: a stopped one leaves its jobs running, unobserved."""
    if status["running"]:
        return f"colocate serve running (pid {status['pid']})" if status["pid"] else "colocate serve running"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(status["heartbeat"])) if status["heartbeat"] else None
    return ("no colocate serve is running on this state directory" + (f" (its last round: {when})" if when else "")
            + ": jobs shown running may still train, but nothing is updated until one is started")


def _failing_line(failures: dict[str, Any]) -> str:
    """Rounds failing now (the last ones did): how many in a row and the last error; empty while rounds succeed."""
    if not failures["in_a_row"]:
        return ""
    last = (failures["last"] or {}).get("error", "")
    return f" · ROUNDS FAILING: {failures['in_a_row']} in a row ({failures['total']} in all), last: {last}"


def _slowdown(row: dict[str, Any]) -> str:
    """Its time in its group over its solo time (blank until measured in its group; ``est.`` when the solo time is
    an estimate, not yet measured alone), and its memory limit; ``exclusive`` or its own bound when it set one."""
    estimated = " est." if row.get("slowdown_basis") not in (None, "measured") else ""
    parts = [f"{row['slowdown']:.2f}×{estimated}" if row.get("slowdown") is not None else ""]
    if row.get("memory_limit_gib"):
        parts.append(f"≤{row['memory_limit_gib']:.1f} GiB")
    if row.get("exclusive"):
        parts.append("exclusive")
    elif row.get("max_slowdown") is not None:
        parts.append(f"bound {row['max_slowdown']:g}")
    return " ".join(p for p in parts if p)


def _why(row: dict[str, Any]) -> str:
    """A queued job's reason to wait (the last round's), a running one's reason not to grow, else its last error."""
    waiting = row.get("waiting") or row.get("note")
    if waiting:
        return f"{waiting['code']}: {waiting['text']}"
    return clip(str(row["error"]), 80)


def clip(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut at a word boundary with an ellipsis (never mid-word)."""
    if len(text) <= width:
        return text
    cut = text[:width - 1]
    if " " in cut:
        cut = cut[:cut.rindex(" ")]
    return cut.rstrip(" ,;:") + "…"


def jobs(
    state: Path = cli_kit.Option(None, "--state", help=STATE_HELP, readable=False),
    server: str = cli_kit.Option(None, "--server", help=SERVER_HELP, show_default=False),
    as_json: bool = input_option("as_json", False),
    watch: bool = cli_kit.Option(False, "--watch", help="Refresh every 2 s until Ctrl-C."),
) -> None:
    """Show every job of a scheduler instance (its owner's only, for others, under serve --private-data)."""
    from scheduler.service.front.remote import connect

    client = connect(state, server)
    where = server or str(state)
    store = None
    if client is None:  # the state directory's owner, no server running: read it directly (refused here if bad)
        from scheduler.service.state.store import StateStore

        store = StateStore(state, create=False, readonly=True)

    def snapshot() -> dict[str, Any] | None:
        from scheduler.service.front.views import jobs_snapshot

        if client is not None:
            return dict(client.call("jobs"))
        if store is None or not (state / "state.db").exists():  # a directory no server or submit has used (yet)
            return None
        return jobs_snapshot(store)

    if as_json:  # scripts poll this: no Rich console (its module imports pandas)
        from scheduler.service.front.views import jobs_snapshot

        found = snapshot()
        if found is None:  # nothing submitted yet: the empty state, as a reader sees it
            found = jobs_snapshot(store) if store is not None else {}
        found.pop("last_round", None)
        cli_kit.echo(json.dumps(found, indent=2))
        return
    from colocate.commands._output import console, error_console

    damaged = [0]

    def render() -> Any:
        found = snapshot()
        if found is None:
            return _table([], f"none: {where} has no state.db yet (colocate serve or submit creates it)")
        damaged[0] = len(found["set_aside"])
        return _table(found["jobs"], f"{found['rounds']} rounds · last {found['last_round'] or '-'}"
                      f" · {_server_line(found['server'])}{_failing_line(found['round_failures'])}")

    if not watch:
        console.print(render())
        if damaged[0]:
            error_console.print(f"{damaged[0]} damaged row(s) of the state database set aside; "
                                f"colocate state check --state {where} lists them", highlight=False, markup=False)
        return
    from rich.live import Live

    try:
        with Live(render(), console=console, refresh_per_second=1) as live:
            while True:
                time.sleep(2.0)
                live.update(render())
    except KeyboardInterrupt:
        pass
