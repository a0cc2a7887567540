"""Output directories: checked before any work starts, and locked so one campaign writes each at a time.

:func:`prepare_out_dir` turns the ways ``--out`` can be wrong (a file, under a file, not writable) into one
line naming the option; :func:`check_out_dir` and :func:`check_out_file` check the same without creating
anything, for commands that check everything before their first write. :func:`directory_lock` takes an
exclusive ``flock`` on ``<dir>/.lock`` for as long as a campaign writes there: a second campaign on the same
directory fails at once, naming the pid that holds it, instead of measuring the same runs at the same time
(contaminated timings, lost writes). The kernel drops the lock when its holder exits, however it exits, so a
killed campaign never leaves a stale lock behind.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common.errors import InputError

LOCK_FILE = ".lock"
STATE_DB = "state.db"  # the scheduler's state database (scheduler.service.state.store): no output goes near it


def check_out_dir(path: str | Path, *, field: str = "--out") -> Path:
    """Refuse, creating nothing, an output directory ``path`` that is a file, lies under a file, is inside a
    state directory or (existing) is not writable; :func:`prepare_out_dir` creates it later."""
    out = Path(path)
    refuse_state_target(out, field=field)
    for parent in [out, *out.parents]:
        if parent.exists() and not parent.is_dir():
            where = "is a file" if parent == out else f"lies under the file {parent}"
            raise InputError(where, source=out, field=field, valid="a directory path")
    existing = next((p for p in [out, *out.parents] if p.exists()), None)
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{existing} is not writable", source=out, field=field, valid="a directory you can write to")
    return out


def check_out_file(path: str | Path, *, field: str = "--out") -> Path:
    """Refuse, creating nothing, an output file ``path`` that is a directory, lies under a file, is inside a
    state directory or whose directory cannot be written."""
    target = Path(path)
    if target.is_dir():
        raise InputError("is a directory", source=target, field=field, valid="a file path")
    refuse_state_target(target, field=field)
    under = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
    if under is not None:
        raise InputError(f"lies under the file {under}", source=target, field=field, valid="a file path")
    check_out_dir(target.parent, field=field)
    return target


def prepare_out_dir(path: str | Path, *, field: str = "--out") -> Path:
    """Create ``path`` (and parents) as a writable directory, or raise a one-line :class:`InputError`."""
    out = check_out_dir(path, field=field)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot create the directory ({err.strerror or err})", source=out, field=field,
                         valid="a directory you can write to") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise InputError("the directory is not writable", source=out, field=field,
                         valid="a directory you can write to")
    return out


@contextmanager
def directory_lock(path: str | Path, *, field: str = "--out", what: str = "campaign") -> Iterator[Path]:
    """Hold an exclusive lock on directory ``path`` (created if needed) for the ``with`` block."""
    out = prepare_out_dir(path, field=field)
    lock_path = out / LOCK_FILE
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise InputError(f"cannot create the lock file ({err.strerror or err})", source=out, field=field,
                         valid="a directory you can write to") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise InputError(f"another {what} (pid {holder}) is writing to this directory", source=out,
                             field=field, valid="wait until it ends, or another directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield out
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def prepare_out_file(path: str | Path, *, field: str = "--out") -> Path:
    """Check that ``path`` can be written as a file (its directory is created); a one-line error if not."""
    target = check_out_file(path, field=field)
    prepare_out_dir(target.parent, field=field)
    return target


def refuse_state_target(path: str | Path, *, field: str = "--out") -> None:
    """Refuse an output path that is a state database or lies in a state directory (``learned --out
    S/state.db`` would overwrite the scheduler's state)."""
    out = Path(path).absolute()
    for parent in [out, *out.parents]:
        if parent.name == STATE_DB or (parent.is_dir() and (parent / STATE_DB).is_file()):
            raise InputError("is inside a scheduler state directory", source=path, field=field,
                             valid="a path outside the --state directory")
