"""A damaged row of the state database is set aside, never fatal: each case writes one bad row with plain
SQLite (behind the server's back) into a state with a good job queued; the server (local backend, real
processes, real SQLite) must record the row as set aside — an event naming the table, the key and the
problem — and still complete the good job without a failed round; ``state check`` must list it (exit 1) and
``jobs``, ``jobs --json`` and ``learned`` must still work."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from colocate.cli import app
from common.errors import InputError
from scheduler.executor.registry import make_executor
from scheduler.model.cluster import cluster_from_dict
from scheduler.service.jobs.jobspec import job_from_dict
from scheduler.service.server import ServeConfig, Server
from scheduler.service.state.store import StateStore
from tests.serve_helpers import kill_groups, wait_until

GOOD = {"name": "good", "command": "echo done", "application": "mine", "steps": 1, "batch_size": 4}
VICTIM = {"name": "victim", "command": "sleep 60", "application": "mine", "steps": 1, "batch_size": 4,
          "gpu_types": ["v100"]}  # waits (the cluster has t4s): a row to damage that never runs
HANDLE = json.dumps({"doc": {"key": "g00009", "sharing": "timeslice", "gpu": False, "grace_s": 5.0,
                             "jobs": [{"name": "victim", "dir": "/s/jobs/victim", "env": {}, "argv": ["sleep", "60"],
                                       "memory_limit_bytes": None}],
                             "pid_file": "/s/runs/g00009.pid"}, "handle": {"pid": 12345}})
NOW = time.time()

# case -> (SQL, its parameters, table, key, whether the server reads that row)
CASES: dict[str, tuple[str, tuple, str, str, bool]] = {
    "groups-names-a-missing-job": (
        "INSERT INTO groups VALUES ('g00009', 'local', ?, '[\"ghost\"]', ?)",
        (HANDLE.replace("victim", "ghost"), NOW), "groups", "g00009", True),
    "groups-jobs-not-json": ("INSERT INTO groups VALUES ('g00009', 'local', ?, 'victim', ?)", (HANDLE, NOW),
                             "groups", "g00009", True),
    "groups-handle-not-json": ("INSERT INTO groups VALUES ('g00009', 'local', '{oops', '[\"victim\"]', ?)", (NOW,),
                               "groups", "g00009", True),
    "groups-pid-file-elsewhere": ("INSERT INTO groups VALUES ('g00009', 'local', ?, '[\"victim\"]', ?)",
                                  (HANDLE.replace("/s/runs/g00009.pid", "/etc/passwd"), NOW), "groups", "g00009",
                                  True),
    "groups-placement-overflow": ("INSERT INTO groups VALUES ('g00009', 'local', ?, '[\"victim\"]', ?)",
                                  (HANDLE.replace('"pid_file"', '"placement": {"gpu_type": "t4", "nodes": [1e999], '
                                                  '"gpus": [0]}, "pid_file"'), NOW), "groups", "g00009", True),
    "groups-doc-limit-huge": ("INSERT INTO groups VALUES ('g00009', 'local', ?, '[\"victim\"]', ?)",
                              (HANDLE.replace('"memory_limit_bytes": null', '"memory_limit_bytes": 1e999'), NOW),
                              "groups", "g00009", True),
    "groups-doc-without-argv": ("INSERT INTO groups VALUES ('g00009', 'local', ?, '[\"victim\"]', ?)",
                                (HANDLE.replace('"argv": ["sleep", "60"], ', ''), NOW), "groups", "g00009", True),
    "groups-created-at-text": ("INSERT INTO groups VALUES ('g00009', 'local', ?, '[\"victim\"]', 'noon')", (HANDLE,),
                               "groups", "g00009", True),
    "meta-rounds-not-a-number": ("INSERT OR REPLACE INTO meta VALUES ('rounds', 'many')", (), "meta", "rounds", True),
    "meta-groups-not-a-number": ("INSERT OR REPLACE INTO meta VALUES ('groups', '-3')", (), "meta", "groups", True),
    "meta-startup-inf": ("INSERT OR REPLACE INTO meta VALUES ('startup_s', '{\"mine\": [1e999, 1]}')", (), "meta",
                         "startup_s", True),
    "meta-waiting-shape": ("INSERT OR REPLACE INTO meta VALUES ('waiting', '{\"victim\": 5}')", (), "meta", "waiting",
                           False),
    "meta-heartbeat-inf": ("INSERT OR REPLACE INTO meta VALUES ('heartbeat', 'inf')", (), "meta", "heartbeat", False),
    "meta-probes-shape": ("INSERT OR REPLACE INTO meta VALUES ('probes', '[{\"key\": 5}]')", (), "meta", "probes",
                          False),
    "meta-value-a-blob": ("INSERT OR REPLACE INTO meta VALUES ('last_round', X'1b5b324a')", (), "meta", "last_round",
                          False),
    "measurement-partner-malformed": ("INSERT INTO measurements VALUES ('mine', 't4', 1, 4, 'x@y@z', 0.5, 3)", (),
                                      "measurements", "mine/t4/1/4/x@y@z", True),
    "measurement-iter-inf": ("INSERT INTO measurements VALUES ('mine', 't4', 1, 4, '', 9e999, 3)", (),
                             "measurements", "mine/t4/1/4/", True),
    "measurement-iter-zero": ("INSERT INTO measurements VALUES ('mine', 't4', 1, 4, '', 0.0, 3)", (),
                              "measurements", "mine/t4/1/4/", True),
    "measurement-count-text": ("INSERT INTO measurements VALUES ('mine', 't4', 1, 4, '', 0.5, 'lots')", (),
                               "measurements", "mine/t4/1/4/", True),
    "measurement-gpus-huge": ("INSERT INTO measurements VALUES ('mine', 't4', 1000000000000000, 4, '', 0.5, 3)", (),
                              "measurements", "mine/t4/1000000000000000/4/", True),
    "job-nodes-overflow": ("UPDATE jobs SET nodes = '[1e999]' WHERE name = 'victim'", (), "jobs", "victim", True),
    "job-gpus-not-a-list": ("UPDATE jobs SET gpus = '{\"a\": 1}' WHERE name = 'victim'", (), "jobs", "victim", True),
    "job-state-unknown": ("UPDATE jobs SET state = 'zombie' WHERE name = 'victim'", (), "jobs", "victim", True),
    "job-step-text": ("UPDATE jobs SET step = 'x' WHERE name = 'victim'", (), "jobs", "victim", True),
    "job-step-huge": ("UPDATE jobs SET step = 9223372036854775807 WHERE name = 'victim'", (), "jobs", "victim", True),
    "job-submitted-inf": ("UPDATE jobs SET submitted_at = 9e999 WHERE name = 'victim'", (), "jobs", "victim", True),
    "job-seq-text": ("UPDATE jobs SET seq = 'x' WHERE name = 'victim'", (), "jobs", "victim", True),
    "job-partner-not-names": ("UPDATE jobs SET partner = 'a;rm -rf' WHERE name = 'victim'", (), "jobs", "victim",
                              True),
    "job-error-a-blob": ("UPDATE jobs SET error = X'1b5b324a' WHERE name = 'victim'", (), "jobs", "victim", True),
    "event-time-text": ("INSERT INTO events (time, job, kind, detail) VALUES ('noon', NULL, 'x', 'y')", (), "events",
                        None, False),
}


def _server(state: StateStore) -> Server:
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}}})
    server = Server(state, cluster, make_executor("local"), ServeConfig(round_s=0.5, device="cpu", stop_grace_s=5))
    server.acquire()
    return server


def _cli(*args: str) -> tuple[int, str]:
    """Exit status and output of a command; an input error counts as the console script shows it (status 2)."""
    result = CliRunner().invoke(app, list(args))
    if isinstance(result.exception, InputError):
        return 2, str(result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_row_is_set_aside_and_every_good_job_runs(tmp_path: Path, case: str) -> None:
    sql, args, table, key, server_reads = CASES[case]
    state = StateStore(tmp_path / "state")
    state.submit(job_from_dict(VICTIM))
    with sqlite3.connect(state.path) as conn:
        conn.execute(sql, args)
        if table == "events":
            key = str(conn.execute("SELECT MAX(id) FROM events").fetchone()[0])
    state.submit(job_from_dict(GOOD))  # a submit after the damage works too (a text seq is no number)
    try:
        for command in (["jobs", "--state", str(state.dir)], ["jobs", "--state", str(state.dir), "--json"],
                        ["learned", "--state", str(state.dir)]):
            assert _cli(*command)[0] == 0
        code, output = _cli("state", "check", "--state", str(state.dir))
        assert code == 1, output
        listed = json.loads(output)["set_aside"]
        assert any(r["table"] == table and r["key"] == key for r in listed), listed
        server = _server(state)

        def step() -> bool:
            server.round()
            return (good := state.job("good")) is not None and good.state == "completed"

        wait_until(step, 60, "the good job to complete", interval_s=0.2)
        server.round()  # the round after: the set-aside record is written at a round's end
        kinds = [e["kind"] for e in state.events()]
        assert "round-failed" not in kinds, state.events()
        if server_reads:
            details = [e["detail"] for e in state.events() if e["kind"] == "set-aside"]
            assert any(d.startswith(f"{table} {key}: ") for d in details), details
    finally:
        kill_groups(state.dir)


def test_a_running_job_whose_group_record_is_gone_is_retried(tmp_path: Path) -> None:
    """A job row says running in a group the database does not hold (its row was set aside or deleted): the job
    crashed, as when its supervisor dies, and runs again in a group of its own."""
    state = StateStore(tmp_path / "state")
    state.submit(job_from_dict(GOOD))
    with sqlite3.connect(state.path) as conn:
        conn.execute("UPDATE jobs SET state = 'running', group_key = 'g00042', gpu_type = 't4', num_gpus = 1, "
                     "nodes = '[0]', gpus = '[0]'")
    server = _server(state)
    try:
        wait_until(lambda: server.round() and state.job("good").state == "completed", 60, "the job to complete",
                   interval_s=0.2)
        assert any(e["kind"] == "crashed" and "group's record" in e["detail"] for e in state.events("good"))
    finally:
        kill_groups(state.dir)


def test_a_running_job_whose_row_is_set_aside_is_stopped_and_its_gpu_stays_busy_until_then(tmp_path: Path) -> None:
    """Nothing can settle a group whose members' rows are all damaged: it is stopped. Until it has ended, its GPU
    is busy by the group's own record, so a job queued for that GPU never runs beside it."""
    state = StateStore(tmp_path / "state")
    state.submit(job_from_dict({**GOOD, "name": "long", "command": "exec sleep 60"}))
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
    server = Server(state, cluster, make_executor("local"), ServeConfig(round_s=0.5, device="cpu", stop_grace_s=5))
    server.acquire()
    try:
        wait_until(lambda: server.round() and state.job("long").state == "running", 30, "the long job to start",
                   interval_s=0.2)
        (held,) = state.groups().values()
        assert held.gpus == {("t4", 0, 0)}
        with sqlite3.connect(state.path) as conn:
            conn.execute("UPDATE jobs SET step = 'x' WHERE name = 'long'")
        state.submit(job_from_dict(GOOD))
        together = []

        def step() -> bool:
            server.round()
            together.append(len(state.groups()))
            return (good := state.job("good")) is not None and good.state == "completed"

        wait_until(step, 60, "the queued job to complete", interval_s=0.2)
        assert max(together) == 1, together  # never the damaged job's group and the new one at once
        assert held.key not in state.groups() and not any(
            "sleep 60" in " ".join(j.argv) for g in state.groups().values() for j in g.doc.jobs)
        assert state.job("long") is None and any(r[0] == "jobs" and r[1] == "long" for r in state.set_aside)
    finally:
        kill_groups(state.dir)


@pytest.mark.parametrize("change, problem", [
    ("ALTER TABLE measurements ADD COLUMN extra TEXT", "table 'measurements' has an unknown column 'extra'"),
    ("ALTER TABLE jobs DROP COLUMN error", "table 'jobs' lacks column 'error'"),
    ("DROP TABLE meta; CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL); "
     "INSERT INTO meta VALUES ('schema_version', '1')", "table 'meta' column 'value' is declared differently"),
])
def test_the_start_up_check_covers_columns_and_types(tmp_path: Path, change: str, problem: str) -> None:
    state = StateStore(tmp_path / "state")
    state.close()
    with sqlite3.connect(state.path) as conn:
        conn.executescript(change)
    before = state.path.read_bytes()
    for command in (["jobs", "--state", str(state.dir)], ["state", "check", "--state", str(state.dir)]):
        code, output = _cli(*command)
        assert code == 2 and problem in " ".join(output.split()), output
    with pytest.raises(Exception, match="declared differently|unknown column|lacks column"):
        StateStore(state.dir)
    assert state.path.read_bytes() == before


class _Counting:
    """A connection that counts the characters (bytes of a BLOB) of every value fetched through it."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn, self.fetched = conn, 0
        self.selects: list[str] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.conn, name)

    def execute(self, sql: str, args: tuple = ()) -> "_Fetched":
        rows = self.conn.execute(sql, args).fetchall()
        self.fetched += sum(len(v) for r in rows for v in r if isinstance(v, (str, bytes)))
        self.selects.append(sql)
        return _Fetched(rows)


class _Fetched(list):
    def fetchone(self) -> object:
        return self[0] if self else None

    def fetchall(self) -> list:
        return list(self)


@pytest.mark.parametrize("sql, size, table, key", [
    ("UPDATE jobs SET spec = randomblob(?) WHERE name = 'victim'", 5 * 2**20, "jobs", "victim"),
    ("INSERT INTO measurements VALUES (printf('%.*c', ?, 'x'), 't4', 1, 4, '', 0.5, 3)", 5 * 2**20, "measurements",
     "rowid 1"),
    ("INSERT OR REPLACE INTO meta VALUES ('startup_s', printf('%.*c', ?, 'x'))", 12 * 2**20, "meta", "startup_s"),
], ids=["job-spec-blob", "measurement-name-text", "meta-value-text"])
def test_a_huge_row_is_set_aside_unread_and_not_measured_again(tmp_path: Path, sql: str, size: int, table: str,
                                                               key: str) -> None:
    state = StateStore(tmp_path / "state")
    state.submit(job_from_dict(VICTIM))
    spec = state._conn.execute("SELECT spec FROM jobs WHERE name = 'victim'").fetchone()[0]
    with sqlite3.connect(state.path) as conn:
        conn.execute(sql, (size,))
    counting = _Counting(state._conn)
    state._conn = counting  # type: ignore[assignment]
    server = _server(state)
    server.round()
    server.round()  # the set-aside record is written at a round's end
    details = [e["detail"] for e in state.events() if e["kind"] == "set-aside"]
    held = [int(d.split(" the row holds ")[1].split()[0].replace(",", "")) for d in details
            if d.startswith(f"{table} {key}: the row holds ")]
    assert held and size <= held[0] < size + 1000, details
    assert counting.fetched < 2**20  # its bytes never left SQLite
    counting.selects.clear()
    for _ in range(3):
        server.round()
    assert counting.fetched < 2**20
    reads = [s for s in counting.selects if f" FROM {table} " in s or s.endswith(f" FROM {table}")]
    assert reads and all("rowid NOT IN (" in s for s in reads), reads  # skipped: not even measured again
    assert ("jobs", "victim") not in state.set_aside or table == "jobs"
    if table == "jobs":  # repaired: read again once its recheck is due
        with sqlite3.connect(state.path) as conn:
            conn.execute("UPDATE jobs SET spec = ? WHERE name = 'victim'", (spec,))
        state._limit.recheck_s = 0.0
        assert state.job("victim") is not None and ("jobs", "victim") not in state.set_aside
