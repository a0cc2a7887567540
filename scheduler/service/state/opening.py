"""Opening the state database safely: its directory, its file, another program's locks, damage.

Every way a state path can be wrong ends in one line naming the file and what to do (never a traceback):

* the ``--state`` path is a file, or lies under a file, or cannot be created;
* ``state.db`` is a directory, garbage, truncated or otherwise damaged (SQLite's own checks:
  ``PRAGMA quick_check``), another program's SQLite file (tables but no colocate ``meta`` table with a
  schema version — such a file is never changed: nothing is added to it), of another schema version, or a
  table of another layout (columns, declared types, NOT NULL, primary key: :func:`_check_columns`);
  a table added since the schema version was first written (:data:`ADDED`) may be missing: a writer creates it
  (the migration), a read-only opener reads it as empty;
* a lock held by another program for longer than :func:`lock_wait` seconds (``COLOCATE_STATE_LOCK_WAIT_S``,
  default :data:`DEFAULT_LOCK_WAIT_S`).

Read-only openers (``jobs``, ``learned``, ``cancel`` of an unknown job, ``state check``) use SQLite's
``mode=ro``; a missing database then reads as an empty one held in memory, so they create no file. Recovery
is described in ``docs/hardening.md``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

from common.errors import InputError

DEFAULT_LOCK_WAIT_S = 5.0
LOCK_WAIT_ENV = "COLOCATE_STATE_LOCK_WAIT_S"
RECOVERY = "move it aside and start from a copy that colocate state check accepts (see docs/hardening.md)"
_OURS = ("jobs", "groups", "measurements", "events", "meta")
# tables added to schema version 1 later (a database written before has none: created when opened for writing)
ADDED = ("gradients",)


def lock_wait() -> float:
    """Seconds to wait for another program's lock on the database (``COLOCATE_STATE_LOCK_WAIT_S``)."""
    text = os.environ.get(LOCK_WAIT_ENV, "")
    if not text:
        return DEFAULT_LOCK_WAIT_S
    from common.bounds import check_number

    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    return float(check_number(value, field=LOCK_WAIT_ENV, low=0.0, high=3600.0, source="environment"))


def check_state_dir(path: str | Path, *, create: bool) -> Path:
    """The state directory ``path``: created when ``create`` and missing; one-line errors otherwise."""
    state = Path(path)
    for parent in [state, *state.parents]:
        if parent.exists() and not parent.is_dir():
            where = "is a file" if parent == state else f"lies under the file {parent}"
            raise InputError(where, source=state, field="state", valid="a directory (created if missing)")
    if not state.is_dir():
        if not create:
            raise InputError("state directory not found", source=state, field="state",
                             valid="the --state DIR of a colocate serve or submit")
        try:
            state.mkdir(parents=True)
        except OSError as err:
            raise InputError(f"cannot create the state directory ({err.strerror or err})", source=state,
                             field="state", valid="a directory you can write to") from None
    return state


@contextmanager
def database_errors(path: Path, lock_wait_s: float) -> Iterator[None]:
    """SQLite's errors on ``path`` as one-line :class:`InputError` s saying what to do."""
    try:
        yield
    except sqlite3.OperationalError as err:
        text = str(err)
        if "locked" in text or "busy" in text:
            raise InputError(f"locked by another program for more than {lock_wait_s:g} s", source=path,
                             field="state", valid=f"retry once it is done, or raise {LOCK_WAIT_ENV}") from None
        raise InputError(f"cannot use the state database ({text})", source=path, field="state",
                         valid=RECOVERY) from None
    except sqlite3.DatabaseError as err:
        raise InputError(f"damaged or not a state database ({err})", source=path, field="state",
                         valid=RECOVERY) from None


def _connect(path: Path, readonly: bool, lock_wait_s: float) -> sqlite3.Connection:
    if readonly:
        target, uri = f"file:{quote(str(path.resolve()))}?mode=ro", True
    else:
        target, uri = str(path), False
        # created 0600, never world-readable: SQLite gives its -wal and -shm files the database's own mode, and
        # under `serve --users multi` the state directory is 0711 (owners pass through it to their jobs)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    conn = sqlite3.connect(target, uri=uri, timeout=lock_wait_s, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout={int(lock_wait_s * 1000)}")
    return conn


def _check_ours(conn: sqlite3.Connection, path: Path, version: str, schema: str, readonly: bool = True) -> bool:
    """True for a colocate state database of ``version``, False for an empty file; else an error."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return False
    found = None
    if "meta" in tables:
        found = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if found is None:
        shown = ", ".join(sorted(tables)[:5])
        raise InputError(f"is another program's SQLite file (tables {shown}); it was left unchanged", source=path,
                         field="state", valid="the state directory of colocate serve, or a new directory")
    if str(found[0]) != version:
        raise InputError(f"has schema version {str(found[0])[:20]!r}; this colocate reads version {version}",
                         source=path, field="state", valid="a state directory written by this version")
    missing = [t for t in _OURS if t not in tables]
    if missing:
        raise InputError(f"has no table {missing[0]!r}", source=path, field="state", valid=RECOVERY)
    _add_owners(conn, path, readonly)
    _check_columns(conn, path, schema)
    check = conn.execute("PRAGMA quick_check").fetchone()
    if check is None or check[0] != "ok":
        raise InputError(f"fails SQLite's check ({str(check[0] if check else '')[:120]})", source=path,
                         field="state", valid=RECOVERY)
    return True


# columns added since the first layout: (name, declaration); an older database gets them on its first writable
# open, its jobs owned by the state directory's owner (they were submitted by whoever could write it)
_OWNER_COLUMNS = (("owner", "TEXT NOT NULL DEFAULT ''"), ("owner_uid", "INTEGER NOT NULL DEFAULT -1"))


def _add_owners(conn: sqlite3.Connection, path: Path, readonly: bool) -> None:
    """Add the owner columns to a ``jobs`` table written before jobs had owners (a read-only opener cannot: it
    says which command adds them)."""
    have = {c[0] for c in _columns(conn, "jobs")}
    lacking = [(n, d) for n, d in _OWNER_COLUMNS if n not in have]
    if not lacking:
        return
    if readonly:
        raise InputError(f"table 'jobs' lacks column {lacking[0][0]!r} (written before jobs had owners)",
                         source=path, field="--state", valid="start colocate serve on it once: it adds the owner columns")
    import pwd

    uid = path.parent.stat().st_uid
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    conn.execute("BEGIN IMMEDIATE")
    try:
        for column, declaration in lacking:
            conn.execute(f"ALTER TABLE jobs ADD COLUMN {column} {declaration}")
        conn.execute("UPDATE jobs SET owner = ?, owner_uid = ?", (name, uid))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, str, int, int]]:
    """(name, declared type, NOT NULL, position in the primary key) of each column, in order."""
    return [(str(r[1]), str(r[2]).upper(), int(r[3]), int(r[5])) for r in conn.execute(f"PRAGMA table_info({table})")]


@lru_cache(maxsize=4)
def _expected_columns(schema: str) -> dict[str, list[tuple[str, str, int, int]]]:
    """The columns of every table as ``schema`` creates them (built in memory: the schema is their one source)."""
    conn = sqlite3.connect(":memory:")
    try:
        for statement in schema.split(";"):
            if statement.strip():
                conn.execute(statement)
        return {t: _columns(conn, t) for t in (*_OURS, *ADDED)}
    finally:
        conn.close()


def _check_columns(conn: sqlite3.Connection, path: Path, schema: str) -> None:
    """Each table has exactly the columns this version writes and reads — names, types, NOT NULL and primary
    key, in order (rows are inserted by position): a table of another layout is refused at start-up rather
    than failing on its first row."""
    for table, expected in _expected_columns(schema).items():
        found = _columns(conn, table)
        if not found and table in ADDED:  # written before the table was added: migrated by a writer
            continue
        if found == expected:
            continue
        names = [c[0] for c in expected]
        have = {c[0]: c for c in found}
        lacking = [n for n in names if n not in have]
        extra = [c[0] for c in found if c[0] not in names]
        changed = [c[0] for c in expected if c[0] in have and have[c[0]] != c]
        problem = (f"lacks column {lacking[0]!r}" if lacking else f"has an unknown column {extra[0]!r}" if extra
                   else f"column {changed[0]!r} is declared differently" if changed else "has its columns in another order")
        raise InputError(f"table {table!r} {problem}", source=path, field="state", valid=RECOVERY)


def open_database(path: Path, *, readonly: bool, lock_wait_s: float, schema: str, version: str) -> sqlite3.Connection:
    """A connection to the state database ``path`` (see the module docstring for what is refused)."""
    if path.exists() and not path.is_file():
        raise InputError("is not a file", source=path, field="state", valid=RECOVERY)
    if readonly and not path.exists():
        return _empty(schema, version)
    with database_errors(path, lock_wait_s):
        conn = _connect(path, readonly, lock_wait_s)
        try:
            ours = _check_ours(conn, path, version, schema, readonly)
            if readonly and not ours:  # an empty file: reads as an empty state
                conn.close()
                return _empty(schema, version)
            if not readonly:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")  # with WAL: durable across process crashes
                if not ours or _lacks_added(conn):  # an older file gets the tables added since (IF NOT EXISTS)
                    _create(conn, schema, version)
        except BaseException:
            conn.close()
            raise
    return conn


def _lacks_added(conn: sqlite3.Connection) -> bool:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return any(t not in tables for t in ADDED)


def _empty(schema: str, version: str) -> sqlite3.Connection:
    """An empty state in memory: what a read-only opener sees where nothing was submitted yet."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    _create(conn, schema, version)
    return conn


def _create(conn: sqlite3.Connection, schema: str, version: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    for statement in schema.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (version,))
    conn.execute("COMMIT")
