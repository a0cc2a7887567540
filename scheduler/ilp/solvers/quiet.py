"""HiGHS instances that print nothing on stdout: the one way this project creates a ``highspy.Highs``.

highspy >= 1.12 prints a "Running HiGHS ... Copyright" banner from C++ straight to file descriptor 1 the first
time a ``Highs`` is constructed in a process — before ``output_flag`` can be set. That broke every
``--json`` output when piped. Redirecting ``sys.stdout`` is not enough (native code writes to the fd), so
the first construction runs with fd 1 pointed at /dev/null; later constructions print nothing. PuLP's
``pulp.HiGHS`` builds its own ``Highs`` (and older PuLP/highspy pairs, e.g. PuLP 2.8 with highspy 1.7, log
the whole solve to stdout despite ``msg=False``): solve through it inside :func:`native_stdout_to_devnull`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()
_banner_printed = False


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    return ctypes.CDLL(None)


def _flush_c_stdio() -> None:
    """Flush C's stdio buffers (fully buffered when stdout is a pipe), so nothing written while redirected
    lands on the real stdout after the redirection ends."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        _libc().fflush(None)


@contextlib.contextmanager
def native_stdout_to_devnull() -> Iterator[None]:
    """File-descriptor-level: whatever native code writes to fd 1 inside the block is discarded (process-wide
    while it lasts: keep the block to the solver call)."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        _flush_c_stdio()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def silence_highs_banner() -> None:
    """Construct the process's first ``Highs`` with stdout discarded, so no later one prints the banner."""
    global _banner_printed
    if _banner_printed:
        return
    import highspy

    with _lock:
        if _banner_printed:
            return
        with native_stdout_to_devnull():
            highspy.Highs()
        _banner_printed = True


def new_highs(threads: int | None = None) -> Any:
    """A silent ``highspy.Highs`` (banner suppressed, ``output_flag`` off), optionally with a thread count."""
    import highspy

    silence_highs_banner()
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    return h
