"""Signal handling shared by everything that owns child processes (campaigns, launches)."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere), so no orphans are left."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so every ``finally`` (process teardown, the MPS daemon's quit) runs.

    Outside the main thread signal handlers cannot be installed; the caller then handles termination.
    """
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
