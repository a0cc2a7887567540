"""The state of one scheduler instance: an SQLite database (WAL mode) in its state directory.

Every change is a transaction, so ``kill -9`` of the server at any instant leaves either the old or the new
state, never half of one. While a server runs, ``submit``, ``cancel`` and ``jobs`` reach it through its API
(:mod:`scheduler.service.api`) and its one connection does every write; without one, the state directory's
owner's commands open this file themselves (WAL lets them read while another writes). Tables:

* ``jobs`` — one row per submitted job: its spec (JSON), its owner (user name and uid), state, where it runs
  now (GPU type, count, batch, partner, nodes and GPUs, group), progress (step, samples, measured samples/s),
  restarts and crashes;
* ``groups`` — what runs now, one row per GPU group: the executor's handle (process ids and start times, or
  a Ray actor's name), so a restarted server re-adopts running jobs;
* ``measurements`` — measured mean iteration time per (application, GPU type, GPU count, batch, partner
  type; '' = solo) with the number of samples behind it (the online-learning table);
* ``events`` — an append-only log (submitted, started, stopped, resized, completed, crashed, failed, ...);
* ``gradients`` — per job, the gradient statistics it reports (|G|², tr Σ, learning rate), smoothed over its
  reports (:mod:`scheduler.learning.gradient_noise`; added after version 1: a writer creates it in an older file);
* ``meta`` — key/value: schema version, the server's pid and heartbeat, the round counter.

Job states: ``queued`` (waiting for GPUs) → ``running`` → ``completed`` | ``failed`` | ``cancelled``; a job
that is stopped for a move goes back to ``queued`` until it restarts (its checkpoint keeps its progress).
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import InputError
from common.names import is_safe_name
from scheduler.service.jobs.jobspec import JobSpec
from scheduler.service.state.bounded import RowLimit
from scheduler.service.state.opening import lock_wait
from scheduler.service.state.rows import (
    MAX_COUNT,
    BadRow,
    GroupRecord,
    Partly,
    check_event,
    check_gradients,
    check_group,
    check_job,
    check_measurement,
    check_meta,
    int_list,
    row_key,
)

DB_NAME = "state.db"  # state_open.refuse_state_target knows this name too
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
    sample_step INTEGER, sample_elapsed REAL, error TEXT NOT NULL DEFAULT '', seq INTEGER NOT NULL,
    owner TEXT NOT NULL DEFAULT '', owner_uid INTEGER NOT NULL DEFAULT -1
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
CREATE TABLE IF NOT EXISTS gradients (
    job TEXT PRIMARY KEY, grad_sqr REAL NOT NULL, grad_var REAL NOT NULL, lr REAL, reports INTEGER NOT NULL,
    step INTEGER NOT NULL, updated_at REAL NOT NULL
);
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
    owner: str = ""  # who submitted it (a user name; '' in rows written before owners were recorded)
    owner_uid: int = -1  # that user's uid (-1: unknown), as the kernel or a token named the caller

    invalid: str = ""  # why the stored spec is not one submit would accept ("" = valid; see from_sql)

    @classmethod
    def from_sql(cls, row: sqlite3.Row, specs: dict[Any, JobSpec | InputError] | None = None,
                 source: str = DB_NAME) -> "JobRow":
        """Build from a row whose other columns :func:`~scheduler.service.state.rows.check_job` accepted; ``specs``
        caches validated specs by their JSON text (a job's spec never changes).

        The spec is validated again (:func:`~scheduler.service.jobs.jobspec.spec_from_row`): a row that fails —
        written behind ``submit``'s back, or damaged — comes back with a stand-in spec and the reason in
        ``invalid``, so readers show it and the server fails that job instead of stopping.
        """
        from scheduler.service.jobs.jobspec import spec_from_row

        values = dict(row)
        values.pop("seq", None)
        key = (values["name"], values["spec"])
        spec = specs.get(key) if specs is not None else None
        if spec is None:
            try:
                spec = spec_from_row(str(values["name"]), values["spec"], source=source)
            except InputError as err:
                spec = err
            if specs is not None:
                specs[key] = spec
        values["cancel_requested"] = bool(values["cancel_requested"])
        values["nodes"], values["gpus"] = int_list(values["nodes"], "nodes"), int_list(values["gpus"], "gpus")
        if isinstance(spec, InputError):
            values["invalid"] = str(spec)
            spec = JobSpec(name=str(values["name"]), batch_size=1, steps=1, max_retries=0)
        values["spec"] = spec
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


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    """A read of the database whose SQLite errors become one-line :class:`InputError` s naming the file."""
    @functools.wraps(method)
    def wrapper(self: "StateStore", *args: Any, **kwargs: Any) -> Any:
        from scheduler.service.state.opening import database_errors

        with database_errors(self.path, self.lock_wait_s):
            return method(self, *args, **kwargs)
    return wrapper


@dataclass(frozen=True)
class JobOwner:
    """Whose job it is, as the state records it: a user name and uid (from the kernel's peer credentials or a
    token). The Unix account the job then runs as is :class:`common.owners.Owner`."""

    name: str
    uid: int

    @classmethod
    def of_process(cls) -> "JobOwner":
        """This process's user (a submit written directly, by the state directory's owner)."""
        import os
        import pwd

        uid = os.geteuid()
        try:
            return cls(pwd.getpwuid(uid).pw_name, uid)
        except KeyError:  # a uid with no passwd entry (a container): its number names it
            return cls(str(uid), uid)

    def __str__(self) -> str:
        return f"{self.name} (uid {self.uid})"


class StateStore:
    """Transactions over the state database of one state directory."""

    def __init__(self, state_dir: str | Path, *, create: bool = True, readonly: bool = False,
                 lock_wait_s: float | None = None) -> None:
        """``readonly``: open for reading only and create nothing (a missing database reads as empty);
        ``create``: make the directory when missing; ``lock_wait_s``: how long to wait for another program's
        lock (default :func:`lock_wait`)."""
        from scheduler.service.state.opening import check_state_dir, open_database

        # absolute: group documents store paths under it, and a server restarted elsewhere must find them
        self.dir = check_state_dir(state_dir, create=create and not readonly).absolute()
        self.path = self.dir / DB_NAME
        self.readonly = readonly
        self.lock_wait_s = lock_wait() if lock_wait_s is None else lock_wait_s
        self._specs: dict[Any, JobSpec | InputError] = {}
        self._rows: dict[tuple[Any, ...], JobRow] = {}
        self._meta_text: dict[str, str] = {}
        # (table, key) -> why the row is not used: what the last reads found (:mod:`.rows`)
        self.set_aside: dict[tuple[str, str], str] = {}
        self._limit = RowLimit()  # rows too large to read: left unread (:mod:`.bounded`)
        self._conn = open_database(self.path, readonly=readonly, lock_wait_s=self.lock_wait_s, schema=_SCHEMA,
                                   version=SCHEMA_VERSION)

    def close(self) -> None:
        self._conn.close()

    @property
    def changes(self) -> int:
        """Rows this store has inserted, updated or deleted since it opened: a value read from it before is still
        current while this has not moved (the server's store is ``state.db``'s one writer)."""
        return self._conn.total_changes

    @contextmanager
    def transaction(self) -> Iterator["Transaction"]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on any exception)."""
        from scheduler.service.state.opening import database_errors

        with database_errors(self.path, self.lock_wait_s):
            if self.readonly:
                raise InputError("opened read-only", source=self.path, field="state",
                                 valid="a command that writes (submit, cancel, serve)")
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield Transaction(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    # -- reads -------------------------------------------------------------------------------------------
    # Every read checks each row (:mod:`.rows`); a bad one is left out and its problem kept in ``set_aside``.
    def _note(self, table: str, values: dict[str, Any], problem: str | None) -> None:
        key = (table, row_key(table, values))
        if problem is None:
            self.set_aside.pop(key, None)
        else:
            self.set_aside[key] = problem

    def _forget(self, table: str) -> None:
        """Before a full read of ``table``: its rows' earlier problems are found again, or were fixed."""
        self.set_aside = {k: v for k, v in self.set_aside.items() if k[0] != table}

    def _select(self, what: str, table: str, where: str = "", args: tuple[Any, ...] = (), order: str = "") -> Any:
        """``SELECT what FROM table WHERE where ORDER BY order``, leaving out (and setting aside, unread) the rows
        too large to read (:mod:`.bounded`)."""
        before = self._limit.set_aside(table)
        clause, values = self._limit.where(self._conn, table, where, args)
        now = self._limit.set_aside(table)
        for key in before.keys() - now.keys():  # measured again and small now: read (and checked) below
            self.set_aside.pop((table, key), None)
        for key, problem in now.items():
            self.set_aside[(table, key)] = problem
        return self._conn.execute(f"SELECT {what} FROM {table}{clause}{' ORDER BY ' + order if order else ''}",
                                  values)

    def _job_row(self, raw: sqlite3.Row, seen: dict[tuple[Any, ...], JobRow]) -> JobRow | None:
        """The row checked and built, or None when it is set aside; ``seen`` collects the rows built."""
        key = tuple(raw)  # an unchanged row (most queued jobs, most rounds) is not rebuilt
        row = self._rows.get(key)
        if row is None:
            values = dict(raw)
            try:
                check_job(values)
                row = JobRow.from_sql(raw, self._specs, str(self.path))
            except BadRow as err:
                self._note("jobs", values, str(err))
                return None
        seen[key] = row
        return row

    @_guarded
    def jobs(self, states: tuple[str, ...] | None = None) -> list[JobRow]:
        """The usable ``jobs`` rows (in ``states``), in submission order."""
        where, args = (f"state IN ({','.join('?' * len(states))})", states) if states else ("", ())
        if not states:
            self._forget("jobs")
        rows: list[JobRow] = []
        seen: dict[tuple[Any, ...], JobRow] = {}
        for raw in self._select("*", "jobs", where, args, "seq"):
            row = self._job_row(raw, seen)
            if row is not None:
                rows.append(row)
        if states:
            self._rows.update(seen)
        else:
            self._rows = seen  # a full read bounds the cache to the jobs' current versions
        return rows

    @_guarded
    def cancel_requested(self, state: str) -> list[str]:
        """Names of jobs in ``state`` whose cancellation was requested."""
        return [r[0] for r in self._select("name", "jobs", "state = ? AND cancel_requested = 1", (state,), "seq")
                if is_safe_name(r[0])]

    @_guarded
    def job(self, name: str) -> JobRow | None:
        """The job ``name``; None when there is none or its row is set aside."""
        row = self._select("*", "jobs", "name = ?", (name,)).fetchone()
        return self._job_row(row, {}) if row else None

    @_guarded
    def groups(self) -> dict[str, GroupRecord]:
        """The usable ``groups`` rows by key."""
        names = {r[0] for r in self._select("name", "jobs")}
        self._forget("groups")
        out = {}
        for raw in self._select("*", "groups"):
            values = dict(raw)
            try:
                out[values["key"]] = check_group(values, names)
            except BadRow as err:
                self._note("groups", values, str(err))
        return out

    @_guarded
    def measurements(self) -> list[dict[str, Any]]:
        """The usable ``measurements`` rows (what the learning code may trust: names, ranges, finite times)."""
        self._forget("measurements")
        return self._usable("measurements", self._select("*", "measurements"), check_measurement)

    @_guarded
    def gradients(self) -> dict[str, dict[str, Any]]:
        """The usable ``gradients`` rows by job; none in a file written before the table (opened read-only)."""
        if not self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'gradients'").fetchone():
            return {}
        self._forget("gradients")
        return {r["job"]: r for r in self._usable("gradients", self._select("*", "gradients"), check_gradients)}

    @_guarded
    def events(self, job: str | None = None) -> list[dict[str, Any]]:
        if job is None:
            self._forget("events")
            rows = self._select("*", "events", order="id")
        else:
            rows = self._select("*", "events", "job = ?", (job,), "id")
        return self._usable("events", rows, check_event)

    def _usable(self, table: str, rows: Iterable[sqlite3.Row],
                check: Callable[[dict[str, Any]], object]) -> list[dict[str, Any]]:
        """The rows ``check`` accepts, as dicts; each refused one is set aside with its reason (``_note``)."""
        out = []
        for raw in rows:
            values = dict(raw)
            try:
                check(values)
            except BadRow as err:
                self._note(table, values, str(err))
                continue
            out.append(values)
        return out

    @_guarded
    def meta(self, key: str) -> str | None:
        """The text of meta ``key``; None when absent or set aside (not what its readers expect: :mod:`.rows`)."""
        return None if self.meta_value(key) is None else self._meta_text.get(key)

    @_guarded
    def meta_value(self, key: str) -> Any:
        """Meta ``key`` as its readers use it (a counter as an int, a JSON value parsed); None when absent or
        set aside."""
        row = self._select("value", "meta", "key = ?", (key,)).fetchone()
        self._meta_text.pop(key, None)
        if row is None and key in self._limit.set_aside("meta"):
            return None  # too large to read: set aside, unread
        if row is None:
            self._note("meta", {"key": key}, None)
            return None
        try:
            value = check_meta(key, row[0])
        except Partly as err:  # usable in part: its readers leave the bad entries out too
            self._note("meta", {"key": key}, str(err))
            self._meta_text[key] = row[0]
            return err.value
        except BadRow as err:
            self._note("meta", {"key": key}, str(err))
            return None
        self._note("meta", {"key": key}, None)
        self._meta_text[key] = row[0]
        return value

    @_guarded
    def check_meta(self) -> None:
        """Read every meta value once (``state check``: each bad one lands in ``set_aside``)."""
        for (key,) in self._select("key", "meta").fetchall():
            if isinstance(key, str):
                self.meta_value(key)
            else:
                self._note("meta", {"key": key}, "the key is not a text")

    # -- writes from other processes -------------------------------------------------------------------
    def submit(self, spec: JobSpec, source: str = "<job>", owner: JobOwner | None = None) -> str:
        """Queue a job; a name already in use is an input error."""
        return self.submit_many([(spec, source)], owner)[0]

    def submit_many(self, jobs: list[tuple[JobSpec, str]], owner: JobOwner | None = None) -> list[str]:
        """Queue ``(spec, source)`` jobs in order, in one transaction: a name already in use (in the state or
        earlier in ``jobs``) is an input error naming its source, and queues none of them. One transaction
        holds the write lock once, however many jobs (the server and other submitters wait less). ``owner``:
        who submits (default: this process's user); each ``submitted`` event names them."""
        owner = owner or JobOwner.of_process()
        with self.transaction() as db:
            seq = db.execute("SELECT COALESCE(MAX(CASE WHEN typeof(seq) = 'integer' AND seq BETWEEN 0 AND ? THEN seq "
                             "END), 0) FROM jobs", (MAX_COUNT,)).fetchone()[0]
            for spec, source in jobs:
                if db.execute("SELECT 1 FROM jobs WHERE name = ?", (spec.name,)).fetchone():
                    raise InputError(f"a job named {spec.name!r} was already submitted", source=source,
                                     field="name", valid="a name not used in this state directory")
                seq += 1
                db.execute("INSERT INTO jobs (name, spec, state, submitted_at, seq, owner, owner_uid) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?)",
                           (spec.name, json.dumps(spec.to_dict()), QUEUED, time.time(), seq, owner.name, owner.uid))
                db.event(spec.name, "submitted", f"by {owner}")
        return [spec.name for spec, _ in jobs]

    @_guarded
    def request_cancel(self, name: str, by: JobOwner | None = None) -> str:
        """Mark a job for cancellation (the server stops it next round); returns its state. ``by``: who asks
        (default: this process's user), named in the ``cancel-requested`` event."""
        row = self._conn.execute("SELECT state FROM jobs WHERE name = ?", (name,)).fetchone()
        if row is None:
            known = [r[0] for r in self._conn.execute("SELECT name FROM jobs ORDER BY seq DESC LIMIT 10")]
            raise InputError(f"no job named {name!r}", source=self.dir, field="NAME",
                             valid=", ".join(known) or "no jobs submitted yet")
        if row[0] in FINAL_STATES:
            return str(row[0])
        with self.transaction() as db:
            row = db.execute("SELECT state FROM jobs WHERE name = ?", (name,)).fetchone()
            db.execute("UPDATE jobs SET cancel_requested = 1 WHERE name = ?", (name,))
            db.event(name, "cancel-requested", f"by {by or JobOwner.of_process()}")
            return str(row[0])


class Transaction:
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

    def gradients_of(self, job: str) -> dict[str, Any] | None:
        """The job's ``gradients`` row, checked; None when it has none or the row is damaged (it starts over)."""
        raw = self.conn.execute("SELECT * FROM gradients WHERE job = ?", (job,)).fetchone()
        if raw is None:
            return None
        values = dict(raw)
        try:
            check_gradients(values)
        except BadRow:
            return None
        return values

    def put_gradients(self, job: str, stats: dict[str, Any]) -> None:
        """A job's smoothed gradient statistics (``grad_sqr``, ``grad_var``, ``lr``, ``reports``, ``step``)."""
        self.conn.execute("INSERT OR REPLACE INTO gradients VALUES (?, ?, ?, ?, ?, ?, ?)",
                          (job, stats["grad_sqr"], stats["grad_var"], stats["lr"], stats["reports"], stats["step"],
                           time.time()))

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
