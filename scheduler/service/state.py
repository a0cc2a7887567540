"""The state of one scheduler instance: an SQLite database (WAL mode) in its state directory.

Every change is a transaction, so ``kill -9`` of the server at any instant leaves either the old or the new
state, never half of one; ``submit``, ``cancel`` and ``jobs`` run in other processes against the same file
(WAL lets them read while the server writes). Tables:

* ``jobs`` — one row per submitted job: its spec (JSON), state, where it runs now (GPU type, count, batch,
  partner, nodes and GPUs, group), progress (step, samples, measured samples/s), restarts and crashes;
* ``groups`` — what runs now, one row per GPU group: the executor's handle (process ids and start times, or
  a Ray actor's name), so a restarted server re-adopts running jobs;
* ``measurements`` — measured mean iteration time per (application, GPU type, GPU count, batch, partner
  type; '' = solo) with the number of samples behind it (the online-learning table);
* ``events`` — an append-only log (submitted, started, stopped, resized, completed, crashed, failed, ...);
* ``meta`` — key/value: schema version, the server's pid and heartbeat, the round counter.

Job states: ``queued`` (waiting for GPUs) → ``running`` → ``completed`` | ``failed`` | ``cancelled``; a job
that is stopped for a move goes back to ``queued`` until it restarts (its checkpoint keeps its progress).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import InputError
from scheduler.service.jobspec import JobSpec

DB_NAME = "state.db"
SCHEMA_VERSION = "1"
QUEUED, RUNNING, COMPLETED, FAILED, CANCELLED = "queued", "running", "completed", "failed", "cancelled"
ACTIVE_STATES = (QUEUED, RUNNING)
FINAL_STATES = (COMPLETED, FAILED, CANCELLED)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY, spec TEXT NOT NULL, state TEXT NOT NULL, submitted_at REAL NOT NULL,
    started_at REAL, finished_at REAL, cancel_requested INTEGER NOT NULL DEFAULT 0,
    restarts INTEGER NOT NULL DEFAULT 0, crashes INTEGER NOT NULL DEFAULT 0,
    gpu_type TEXT, num_gpus INTEGER NOT NULL DEFAULT 0, batch_size INTEGER, partner TEXT,
    nodes TEXT, gpus TEXT, group_key TEXT,
    step INTEGER NOT NULL DEFAULT 0, samples INTEGER NOT NULL DEFAULT 0, samples_per_s REAL,
    sample_step INTEGER, sample_elapsed REAL, error TEXT NOT NULL DEFAULT '', seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS groups (
    key TEXT PRIMARY KEY, executor TEXT NOT NULL, handle TEXT NOT NULL, jobs TEXT NOT NULL, created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS measurements (
    application TEXT NOT NULL, gpu_type TEXT NOT NULL, num_gpus INTEGER NOT NULL, batch_size INTEGER NOT NULL,
    partner_type TEXT NOT NULL, iter_time_s REAL NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (application, gpu_type, num_gpus, batch_size, partner_type)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, job TEXT, kind TEXT NOT NULL, detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(frozen=True)
class JobRow:
    """One row of ``jobs`` as the round loop and ``colocate jobs`` see it."""

    name: str
    spec: JobSpec
    state: str
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    cancel_requested: bool
    restarts: int
    crashes: int
    gpu_type: str | None
    num_gpus: int
    batch_size: int | None
    partner: str | None
    nodes: tuple[int, ...]
    gpus: tuple[int, ...]
    group_key: str | None
    step: int
    samples: int
    samples_per_s: float | None
    sample_step: int | None
    sample_elapsed: float | None
    error: str

    @classmethod
    def from_sql(cls, row: sqlite3.Row, specs: dict[str, JobSpec] | None = None) -> "JobRow":
        """Build from a row; ``specs`` caches parsed specs by their JSON text (a job's spec never changes)."""
        values = dict(row)
        values.pop("seq", None)
        text = values["spec"]
        spec = specs.get(text) if specs is not None else None
        if spec is None:
            spec = JobSpec.from_dict(json.loads(text))
            if specs is not None:
                specs[text] = spec
        values["spec"] = spec
        values["cancel_requested"] = bool(values["cancel_requested"])
        values["nodes"] = tuple(json.loads(values["nodes"])) if values["nodes"] else ()
        values["gpus"] = tuple(json.loads(values["gpus"])) if values["gpus"] else ()
        return cls(**values)

    @property
    def others(self) -> tuple[str, ...]:
        """Every other job on this job's GPUs: ``partner`` holds them comma-separated (a pair or a group of
        three; job names have no commas)."""
        return tuple(self.partner.split(",")) if self.partner else ()

    @property
    def target(self) -> int:
        """Steps (or samples) to reach."""
        return self.spec.steps or self.spec.samples or 0

    @property
    def done(self) -> int:
        return self.step if self.spec.steps else self.samples


class StateStore:
    """Transactions over the state database of one state directory."""

    def __init__(self, state_dir: str | Path, *, create: bool = True) -> None:
        self.dir = Path(state_dir)
        if not self.dir.is_dir():
            if not create:
                raise InputError("state directory not found", source=self.dir, field="--state",
                                 valid="the --state DIR of a colocate serve")
            self.dir.mkdir(parents=True)
        self.path = self.dir / DB_NAME
        self._specs: dict[str, JobSpec] = {}
        self._rows: dict[tuple[Any, ...], JobRow] = {}
        self._conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")  # with WAL: durable across process crashes
        self._conn.execute("PRAGMA busy_timeout=60000")
        with self.transaction() as db:
            db.executescript_safe(_SCHEMA)
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def transaction(self) -> Iterator["_Tx"]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on any exception)."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield _Tx(self._conn)
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    # -- reads -------------------------------------------------------------------------------------------
    def jobs(self, states: tuple[str, ...] | None = None) -> list[JobRow]:
        query = "SELECT * FROM jobs"
        args: tuple[Any, ...] = ()
        if states:
            query += f" WHERE state IN ({','.join('?' * len(states))})"
            args = states
        rows, seen = [], {}
        for raw in self._conn.execute(query + " ORDER BY seq", args):
            key = tuple(raw)  # an unchanged row (most queued jobs, most rounds) is not rebuilt
            row = self._rows.get(key) or JobRow.from_sql(raw, self._specs)
            seen[key] = row
            rows.append(row)
        if states:
            self._rows.update(seen)
        else:
            self._rows = seen  # a full read bounds the cache to the jobs' current versions
        return rows

    def cancel_requested(self, state: str) -> list[str]:
        """Names of jobs in ``state`` whose cancellation was requested."""
        return [r[0] for r in self._conn.execute(
            "SELECT name FROM jobs WHERE state = ? AND cancel_requested = 1 ORDER BY seq", (state,))]

    def job(self, name: str) -> JobRow | None:
        row = self._conn.execute("SELECT * FROM jobs WHERE name = ?", (name,)).fetchone()
        return JobRow.from_sql(row, self._specs) if row else None

    def groups(self) -> dict[str, dict[str, Any]]:
        return {r["key"]: {"executor": r["executor"], "handle": json.loads(r["handle"]), "jobs": json.loads(r["jobs"]),
                           "created_at": r["created_at"]}
                for r in self._conn.execute("SELECT * FROM groups")}

    def measurements(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._conn.execute("SELECT * FROM measurements")]

    def events(self, job: str | None = None) -> list[dict[str, Any]]:
        if job is None:
            rows = self._conn.execute("SELECT * FROM events ORDER BY id")
        else:
            rows = self._conn.execute("SELECT * FROM events WHERE job = ? ORDER BY id", (job,))
        return [dict(r) for r in rows]

    def meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    # -- writes from other processes -------------------------------------------------------------------
    def submit(self, spec: JobSpec, source: str = "<job>") -> str:
        """Queue a job; a name already in use is an input error."""
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM jobs WHERE name = ?", (spec.name,)).fetchone():
                raise InputError(f"a job named {spec.name!r} was already submitted", source=source, field="name",
                                 valid="a name not used in this state directory")
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            db.execute("INSERT INTO jobs (name, spec, state, submitted_at, seq) VALUES (?, ?, ?, ?, ?)",
                       (spec.name, json.dumps(spec.to_dict()), QUEUED, time.time(), seq))
            db.event(spec.name, "submitted", "")
        return spec.name

    def request_cancel(self, name: str) -> str:
        """Mark a job for cancellation (the server stops it next round); returns its state."""
        with self.transaction() as db:
            row = db.execute("SELECT state FROM jobs WHERE name = ?", (name,)).fetchone()
            if row is None:
                known = [r[0] for r in db.execute("SELECT name FROM jobs ORDER BY seq DESC LIMIT 10")]
                raise InputError(f"no job named {name!r}", source=self.dir, field="NAME",
                                 valid=", ".join(known) or "no jobs submitted yet")
            if row[0] in FINAL_STATES:
                return str(row[0])
            db.execute("UPDATE jobs SET cancel_requested = 1 WHERE name = ?", (name,))
            db.event(name, "cancel-requested", "")
            return str(row[0])


class _Tx:
    """The connection inside a transaction, with the few writes the round loop needs."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, args: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, args)

    def executescript_safe(self, script: str) -> None:
        for statement in script.split(";"):
            if statement.strip():
                self.conn.execute(statement)

    def event(self, job: str | None, kind: str, detail: str) -> None:
        self.conn.execute("INSERT INTO events (time, job, kind, detail) VALUES (?, ?, ?, ?)",
                          (time.time(), job, kind, detail))

    def update_job(self, name: str, **fields: Any) -> None:
        for key in ("nodes", "gpus"):
            if key in fields and fields[key] is not None:
                fields[key] = json.dumps(list(fields[key]))
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.conn.execute(f"UPDATE jobs SET {sets} WHERE name = ?", (*fields.values(), name))

    def put_group(self, key: str, executor: str, handle: dict[str, Any], jobs: list[str]) -> None:
        self.conn.execute("INSERT OR REPLACE INTO groups VALUES (?, ?, ?, ?, ?)",
                          (key, executor, json.dumps(handle), json.dumps(jobs), time.time()))

    def drop_group(self, key: str) -> None:
        self.conn.execute("DELETE FROM groups WHERE key = ?", (key,))

    def add_measurement(self, application: str, gpu_type: str, num_gpus: int, batch_size: int,
                        partner_type: str, iter_time_s: float) -> None:
        """Fold one sample into the running mean of its configuration."""
        self.conn.execute(
            "INSERT INTO measurements VALUES (?, ?, ?, ?, ?, ?, 1) ON CONFLICT DO UPDATE SET "
            "iter_time_s = (iter_time_s * count + excluded.iter_time_s) / (count + 1), count = count + 1",
            (application, gpu_type, num_gpus, batch_size, partner_type, iter_time_s))

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
