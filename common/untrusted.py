"""What another program controls: files a running job writes, and text it prints.

A job of ``colocate serve`` (or ``colocate launch``) owns its directory: it may write anything there, replace
a file by a named pipe, a symbolic link (to ``/dev/zero``, to a file of gigabytes) or a directory, and print
terminal escape sequences. The scheduler reads those files every round, so each read here is bounded:

* :func:`read_regular` opens with ``O_NOFOLLOW | O_NONBLOCK`` (a link is refused; opening a pipe never
  waits for a writer) under the directory opened with ``O_NOFOLLOW`` too, then ``fstat``-s the open file:
  anything but a regular file is refused *before* a byte is read; a file larger than its cap is refused
  (or, for a log's tail, only its last bytes are read); the read stops at the cap and at a deadline.
* :func:`printable` is how such text is shown to an operator: control characters (escape sequences, a
  carriage return that hides a line, bidirectional overrides) become visible escapes; callers print it
  without markup interpretation (Rich ``Text`` or ``markup.escape``).

Refusals are :class:`UntrustedFile` with a short reason ("is a named pipe (not a regular file)"), which the
caller records against the job. Imports nothing of the project.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

READ_TIMEOUT_S = 1.0  # a regular file of a few KiB reads in microseconds; a hung filesystem does not block us long
_CHUNK = 16 * 1024
_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"))
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


class UntrustedFile(Exception):
    """A file another program controls is not one we read: ``str(err)`` says why (the file is named by the
    caller)."""


def kind_of(mode: int) -> str:
    """What a ``stat`` mode is, in words ("a named pipe", ..., "a regular file")."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def read_regular(directory: str | Path, name: str, *, max_bytes: int, tail: bool = False,
                 timeout_s: float = READ_TIMEOUT_S) -> bytes | None:
    """The bytes of ``directory/name``; None when it does not exist.

    Refused with :class:`UntrustedFile`: ``name`` (or ``directory``) a symbolic link, ``name`` anything but
    a regular file, more than ``max_bytes`` (with ``tail``: only the last ``max_bytes`` are read instead), or
    a read that takes longer than ``timeout_s``.
    """
    try:
        folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        link = err.errno == errno.ENOTDIR and os.path.islink(directory)  # O_DIRECTORY | O_NOFOLLOW on a link
        raise UntrustedFile("its directory is a symbolic link (refused)" if link else
                            _open_problem(err, "its directory")) from None
    try:
        try:
            fd = os.open(name, _OPEN_FLAGS, dir_fd=folder)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise UntrustedFile(_open_problem(err, "it")) from None
    finally:
        os.close(folder)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFile(f"is {kind_of(info.st_mode)} (not a regular file)")
        if info.st_size > max_bytes:
            if not tail:
                raise UntrustedFile(f"is {info.st_size} bytes (at most {max_bytes})")
            os.lseek(fd, info.st_size - max_bytes, os.SEEK_SET)
        return _read_bounded(fd, max_bytes, tail, timeout_s)
    finally:
        os.close(fd)


def _open_problem(err: OSError, what: str) -> str:
    if err.errno == errno.ELOOP:
        return f"{what} is a symbolic link (refused)"
    if err.errno == errno.ENOTDIR:
        return f"{what} is not a directory"
    return f"cannot open {what} ({err.strerror or err})"


def _read_bounded(fd: int, max_bytes: int, tail: bool, timeout_s: float) -> bytes:
    """At most ``max_bytes`` (a file still growing past them is refused unless ``tail``), within the deadline."""
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise UntrustedFile(f"took longer than {timeout_s:g} s to read")
        try:
            chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - size))
        except BlockingIOError:  # a regular file never says this, but a special filesystem might
            raise UntrustedFile("would block") from None
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            if tail:
                return b"".join(chunks)[-max_bytes:]
            raise UntrustedFile(f"grew past {max_bytes} bytes while being read")


def printable(text: object, limit: int | None = None) -> str:
    """``text`` with every control or format character (ESC, CR, BEL, NUL, U+202E, ...) written as a visible
    escape (``\\x1b``, ``\\r``, ``\\u202e``), so it cannot move the cursor, clear or recolour a terminal;
    cut to ``limit`` characters first when given. Markup is the printer's business (print it as plain text)."""
    value = str(text)
    if limit is not None and len(value) > limit:
        value = value[:limit]
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in value)
