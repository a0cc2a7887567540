"""Reads of the state database bounded in size: a row is measured in SQL before any of it is fetched.

Every row the server writes is small (a spec ≤ 64 KiB, texts ≤ 100,000 characters, the largest meta values a few
MiB), but anything may write a 300 MB value into a column (a hand edit, a damaged recovery). Such a row would be
fetched into Python, and checked, every round. Here each read of a table first asks SQLite for the rows over the
table's limit (``length()`` of every column: computed inside SQLite, nothing fetched), and the read itself leaves
them out (``WHERE ... AND size <= limit``). An oversized row is set aside with its size, and remembered by its
rowid: the next reads skip it without measuring it again, for :data:`RECHECK_S`; then it is measured once more, so a
repaired (shrunk) row is used again within that time.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

MAX_ROW_CHARS = 4 * 2**20  # characters (bytes for a BLOB) of all columns of one row
MAX_META_CHARS = 10 * 2**20 + 1024  # meta holds the JSON maps of every job (rows.py reads up to 10 MiB of one)
RECHECK_S = 60.0
KEYS = {"jobs": "name", "groups": "key", "events": "id", "meta": "key"}  # what names a set-aside row, if small


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class RowLimit:
    """Which rows of each table are too large to read, and the SQL that leaves them out."""

    def __init__(self, recheck_s: float = RECHECK_S) -> None:
        self.recheck_s = recheck_s
        self.oversized: dict[tuple[str, int], tuple[str, str, float]] = {}  # (table, rowid) -> key, problem, when
        self._sizes: dict[str, str] = {}

    def _size(self, conn: sqlite3.Connection, table: str) -> str:
        """SQL of a row's size: the sum of ``length()`` over its columns (a BLOB's is read from its header)."""
        if table not in self._sizes:
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            self._sizes[table] = " + ".join(f"COALESCE(length({_quoted(c)}), 0)" for c in columns) or "0"
        return self._sizes[table]

    def limit(self, table: str) -> int:
        return MAX_META_CHARS if table == "meta" else MAX_ROW_CHARS

    def where(self, conn: sqlite3.Connection, table: str, where: str = "", args: tuple[Any, ...] = ()
              ) -> tuple[str, tuple[Any, ...]]:
        """``where`` (SQL over ``args``; '' for every row) narrowed to the rows of ``table`` within its limit, as a
        ``WHERE`` clause and its arguments. Rows newly found over it are remembered (:meth:`set_aside`)."""
        size, limit, now = self._size(conn, table), self.limit(table), time.monotonic()
        self.oversized = {k: v for k, v in self.oversized.items() if k[0] != table or now - v[2] < self.recheck_s}
        # the rowid test first: SQLite reads a column past a huge value by walking that value's overflow pages
        skip = self._skip(table)
        wanted = [*([f"({where})"] if where else [])]
        key = KEYS.get(table)
        named = f"CASE WHEN length({key}) <= 200 THEN {key} END" if key else "NULL"
        found = conn.execute(f"SELECT rowid, {size}, {named} FROM {table} WHERE "
                             f"{' AND '.join([*skip, *wanted, f'{size} > ?'])}", (*args, limit)).fetchall()
        for rowid, chars, name in found:
            shown = str(name) if isinstance(name, (str, int)) and str(name).isprintable() else f"rowid {rowid}"
            self.oversized[(table, rowid)] = (shown, f"the row holds {chars:,} characters, more than the {limit:,} "
                                              "a read takes: left unread", now)
        return " WHERE " + " AND ".join([*self._skip(table), *wanted, f"{size} <= ?"]), (*args, limit)

    def _skip(self, table: str) -> list[str]:
        known = sorted(rowid for t, rowid in self.oversized if t == table)
        return [f"rowid NOT IN ({','.join(map(str, known))})"] if known else []

    def set_aside(self, table: str) -> dict[str, str]:
        """The oversized rows of ``table`` by how they are named (their key, else ``rowid N``): their problems."""
        return {key: problem for (t, _), (key, problem, _) in self.oversized.items() if t == table}
