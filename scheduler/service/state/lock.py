"""One server per state directory: its lock, and whether a server holds it now.

``colocate serve`` holds an exclusive ``flock`` on ``STATE/server.lock`` for its lifetime (the kernel drops it
when the process ends, ``kill -9`` included), with its pid written in the file. :func:`take` is the first
thing a server does on a state directory, before it writes anything there, so a second server refused here
has changed nothing. :func:`server_running` is how ``colocate jobs`` tells whether a server still updates the
jobs it shows: it opens the file read-only (creating nothing) and asks for a shared lock without waiting —
refused means held. A server starting at that instant retries for :data:`TAKE_RETRY_S` before it refuses,
so such a look never turns a server away.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import IO

from common.errors import InputError

LOCK_FILE = "server.lock"
TAKE_RETRY_S = 2.0


def take(state_dir: Path) -> IO[str]:
    """The server's lock on ``state_dir`` (keep the returned file open for the server's lifetime); an
    :class:`InputError` when another server holds it. Opened without truncating, so a refused second server
    cannot erase the first one's pid."""
    try:
        handle = open(state_dir / LOCK_FILE, "a+")
    except OSError as err:  # a read-only directory, or server.lock is not a file we may write
        raise InputError(f"cannot open {LOCK_FILE} ({err.strerror or err})", source=state_dir, field="state",
                         valid="a state directory you can write to") from None
    deadline = time.monotonic() + TAKE_RETRY_S
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.05)  # a reader's look (server_running) holds it for microseconds
                continue
            handle.close()
            raise InputError("another colocate serve runs on this state directory", source=state_dir,
                             field="state", valid="one server per state directory") from None
    handle.truncate(0)
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def server_running(state_dir: Path) -> bool:
    """Whether a ``colocate serve`` holds the lock of ``state_dir`` now (read-only: creates nothing)."""
    try:
        fd = os.open(state_dir / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # no server ever ran here (or the file is not ours to read)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the shared lock at once
    return False
