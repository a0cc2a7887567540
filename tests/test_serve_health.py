"""A running server's health is visible: a failed round is logged with its traceback, counted (events, ``jobs``,
``state check``, a metric); a state database deleted, replaced or truncated under it stops it loudly; ``--max-rounds``
returns as its last round ends."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from colocate.cli import app
from scheduler.service.metrics import ServeMetrics
from scheduler.service.rounds import RoundStats
from scheduler.service.state.health import StateChanged
from tests.serve_helpers import ServeProcess, jobs_json, kill_groups, wait_until, write_cluster
from tests.test_serve_contract import _job, _server

FAILURE = "'<' not supported between instances of 'float' and 'NoneType'"


class FailingPolicy:
    """The server's own policy, but its decision raises (as a defect in a policy would)."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def allocate(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(FAILURE)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _metric(port: int, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def _state_check(state: Path) -> int:
    return CliRunner().invoke(app, ["state", "check", "--state", str(state)]).exit_code


def test_failed_rounds_are_logged_counted_shown_and_checked(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    state, server = _server(tmp_path, round_s=0.05)
    metrics, port = ServeMetrics(), _free_port()
    metrics.serve(port)
    server.on_round_end, server.on_round_failed = metrics.update, metrics.round_failed
    real = server.policy
    try:
        state.submit(_job(tmp_path, "a", 10**6))
        server.policy = FailingPolicy(real)
        server.serve(lambda: False, max_rounds=3)
        err = capfd.readouterr().err
        assert "Traceback (most recent call last)" in err and f"round failed: TypeError: {FAILURE}" in err
        assert [e["kind"] for e in state.events()].count("round-failed") == 3
        shown = jobs_json(state.dir)["round_failures"]
        assert (shown["total"], shown["in_a_row"]) == (3, 3) and FAILURE in shown["last"]["error"]
        table = CliRunner().invoke(app, ["jobs", "--state", str(state.dir)], env={"COLUMNS": "400"}).output
        assert "ROUNDS FAILING: 3 in a row" in table and "TypeError" in table
        assert _state_check(state.dir) == 1
        assert _metric(port, "colocate_round_failures_total") == 3.0
        assert _metric(port, "colocate_rounds_total") == 0.0  # no round succeeded

        server.policy = real  # repaired: the next round succeeds
        server.serve(lambda: False, max_rounds=1)
        shown = jobs_json(state.dir)["round_failures"]
        assert (shown["total"], shown["in_a_row"]) == (3, 0)
        assert "ROUNDS FAILING" not in CliRunner().invoke(app, ["jobs", "--state", str(state.dir)]).output
        assert _state_check(state.dir) == 0
        assert _metric(port, "colocate_round_failures_total") == 3.0 and _metric(port, "colocate_rounds_total") == 1.0
    finally:
        metrics.shutdown()
        kill_groups(state.dir)


def test_max_rounds_returns_as_its_last_round_ends(tmp_path: Path) -> None:
    state, server = _server(tmp_path, round_s=0.3)
    log: list[str] = []

    def round_() -> RoundStats:
        log.append("round")
        return RoundStats(len(log), 0, 0.0, 0.0, 0.0, 0.0, 0, 0)

    server.round = round_  # type: ignore[method-assign]
    server.between_rounds = lambda: log.append("between")  # type: ignore[method-assign]
    server.serve(lambda: False, max_rounds=1)
    assert log == ["round"]  # no wait for a round that never comes
    log.clear()
    server.serve(lambda: False, max_rounds=2)
    assert log[0] == "round" and log[-1] == "round" and log.count("round") == 2 and "between" in log


def _replace(path: Path) -> None:
    copy = path.with_name("copy.db")
    shutil.copyfile(path, copy)
    os.replace(copy, path)  # the same content in a new file: a restored backup


def _truncate_pages(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    assert path.stat().st_size > 2 * page_size
    os.truncate(path, 2 * page_size)


@pytest.mark.parametrize(("change", "said"), [
    (lambda p: p.unlink(), "was deleted"),
    (_replace, "was replaced by another file"),
    (lambda p: os.truncate(p, 0), "was truncated or overwritten (0 bytes"),
    (_truncate_pages, "was truncated ("),
], ids=["deleted", "replaced", "truncated-empty", "truncated-pages"])
def test_a_changed_state_database_stops_the_server(tmp_path: Path, change: Any, said: str) -> None:
    state, server = _server(tmp_path, round_s=0.05)
    rounds: list[int] = []
    server.serve(lambda: False, max_rounds=2, on_round=lambda s: rounds.append(s.round))
    assert rounds == [1, 2]
    change(state.path)
    with pytest.raises(StateChanged, match=said.replace("(", r"\(")):
        server.serve(lambda: False, max_rounds=5, on_round=lambda s: rounds.append(s.round))
    assert rounds == [1, 2]  # not one round on the changed file


@pytest.mark.slow
def test_serve_exits_3_with_one_line_when_its_database_is_deleted(tmp_path: Path) -> None:
    state = tmp_path / "state"
    log = tmp_path / "serve.log"
    server = ServeProcess(state, write_cluster(tmp_path / "cluster.yaml", {"t4": 1}), "--round-s", "0.5", log=log)
    server.start()
    try:
        wait_until(lambda: "round 1:" in log.read_text(errors="replace"), 120, "the first round")
        (state / "state.db").unlink()
        assert server.popen is not None
        assert server.popen.wait(timeout=60) == 3, server.output()
        assert "state.db: field '--state': the state database was deleted while this server ran" in server.output()
        assert "Traceback" not in server.output()
    finally:
        server.stop()


def _cli(*args: str) -> subprocess.CompletedProcess:
    """``colocate ARGS`` as another process: a client with its own connection, opened and closed."""
    return subprocess.run([sys.executable, "-m", "colocate.cli", *args], capture_output=True, text=True, timeout=120)


def test_clients_in_other_processes_never_take_the_database_from_under_the_server(tmp_path: Path) -> None:
    """The identity check before each round once opened and closed ``state.db`` in the server's process, which drops
    every POSIX lock SQLite held there: the next client to close its connection took itself for the last one and
    deleted the WAL, and the server went on in a WAL nobody else reads (a ``cancel`` the server never saw)."""
    state, server = _server(tmp_path, round_s=0.05)
    wal = state.path.with_name("state.db-wal")
    try:
        state.submit(_job(tmp_path, "long", 10**6))
        server.serve(lambda: False, max_rounds=3)
        for _ in range(3):  # readers, each closing its connection between the server's rounds
            assert _cli("jobs", "--state", str(state.dir), "--json").returncode == 0
            server.serve(lambda: False, max_rounds=1)
            assert wal.exists(), "a client deleted the server's WAL"
        assert _cli("cancel", "--state", str(state.dir), "long").returncode == 0
        server.serve(lambda: False, max_rounds=3)
        shown = json.loads(_cli("jobs", "--state", str(state.dir), "--json").stdout)
        assert [j["state"] for j in shown["jobs"]] == ["cancelled"], shown["jobs"]
    finally:
        kill_groups(state.dir)
