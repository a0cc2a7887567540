"""Is a running server still serving the database it opened, and do its rounds succeed?

**Identity.** SQLite keeps the file it opened: a ``state.db`` deleted, replaced (a restore copied over it, ``mv``)
or truncated under a running server would leave it writing into a file no other command reads, or into a damaged
one. The server records the file's identity (device and inode) when it starts and checks it before every round
(:class:`DatabaseWatch`): still there, the same inode, SQLite's header and at least the pages that header counts. When any
of that changed it stops with :class:`StateChanged` (``colocate serve`` exits 3; its groups run on, detached, and a
server restarted on a sound state re-adopts them).

**Failed rounds.** An error that escapes a round is logged with its traceback on stderr (``serve.log``), recorded
as a ``round-failed`` event, and counted in ``meta``: ``round_failures`` (every one since the state was made),
``failing_rounds`` (in a row: 0 once a round succeeds) and ``last_round_failure`` (``{"time", "error"}``).
``colocate jobs`` shows them, ``colocate state check`` exits 1 while rounds fail (``failing_rounds`` > 0), and
the ``colocate_round_failures_total`` metric counts them.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import weakref
from pathlib import Path
from typing import Any

from common.errors import InputError
from common.untrusted import printable

HEADER = b"SQLite format 3\x00"
FAILURES, IN_A_ROW, LAST_FAILURE = "round_failures", "failing_rounds", "last_round_failure"
MAX_ERROR = 500


class StateChanged(InputError):
    """The state database the server opened is no longer the file at its path (or no longer whole)."""


class DatabaseWatch:
    """The state database this server opened, checked before every round (:meth:`check`).

    Its header is read through one descriptor opened here and kept for the watch's life, never through a new
    ``open()``: POSIX drops *all* of a process's locks on a file when *any* descriptor of that file is closed, so a
    per-round ``open``/``close`` would drop the locks SQLite holds for this server's connection. The next client
    (``cancel``, ``jobs``) to close its connection would then take itself for the last one and delete the WAL, and
    the server would go on in a WAL no other command reads: submissions and cancellations lost."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)
        st = os.fstat(self._fd)
        self.known = (st.st_dev, st.st_ino)
        # closed with the watch (a test's many servers): the server's own connection ends with it
        self._closer = weakref.finalize(self, os.close, self._fd)

    def changed(self) -> str | None:
        """How the database at the path stopped being the one opened (None: it is still it)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return "was deleted"
        except OSError as err:
            return f"cannot be read any more ({err.strerror or err})"
        if (st.st_dev, st.st_ino) != self.known:
            return "was replaced by another file"
        head = os.pread(self._fd, 100, 0)  # the same file (same inode): read through the descriptor held
        if len(head) < 100 or not head.startswith(HEADER):
            return f"was truncated or overwritten ({st.st_size} bytes, no SQLite header)"
        page_size = int.from_bytes(head[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        pages = int.from_bytes(head[28:32], "big")
        if head[24:28] == head[92:96] and st.st_size < pages * page_size:  # the header's page count is valid
            return f"was truncated ({st.st_size} bytes; its header counts {pages} pages of {page_size} bytes)"
        return None

    def check(self) -> None:
        """Raise :class:`StateChanged` when the database at the path is not the file the server opened."""
        what = self.changed()
        if what is not None:
            raise StateChanged(f"the state database {what} while this server ran; stopping (running groups go on; "
                               "restart colocate serve on a sound state to re-adopt them)", source=self.path,
                               field="state",
                               valid="a state directory left to its server (docs/hardening.md: backups and recovery)")


def round_failed(state: Any, err: BaseException) -> str:
    """Log ``err``, the error being handled (its traceback on stderr), and record it (event, counters); its line."""
    text = printable(f"round failed: {type(err).__name__}: {err}", MAX_ERROR)
    for line in traceback.format_exc().rstrip().splitlines():
        print(printable(line, 2000), file=sys.stderr)
    print(text, file=sys.stderr, flush=True)
    try:
        total, row = state.meta_value(FAILURES) or 0, state.meta_value(IN_A_ROW) or 0
        with state.transaction() as db:
            db.event(None, "round-failed", text)
            db.set_meta(FAILURES, str(total + 1))
            db.set_meta(IN_A_ROW, str(row + 1))
            db.set_meta(LAST_FAILURE, json.dumps({"time": time.time(), "error": text}))
    except Exception as lost:  # noqa: BLE001 - the database itself may be what failed
        print(printable(f"round failed: not recorded ({type(lost).__name__}: {lost})", MAX_ERROR), file=sys.stderr,
              flush=True)
    return text


def failures_view(state: Any) -> dict[str, Any]:
    """What ``jobs --json`` and ``state check`` show: failed rounds in all and in a row, and the last one."""
    return {"total": state.meta_value(FAILURES) or 0, "in_a_row": state.meta_value(IN_A_ROW) or 0,
            "last": state.meta_value(LAST_FAILURE)}


def valid_failure(key: Any, value: Any) -> bool:
    """An entry of ``last_round_failure``: a finite time, an error text of bounded length."""
    if key == "time":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e10
    return key == "error" and isinstance(value, str) and len(value) <= MAX_ERROR
