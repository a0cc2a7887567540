"""Throw-away Unix users for the tests of jobs that run as their owners (``colocate serve --users multi``).

CI runs as root: :func:`unix_users` adds users with names unique to this process (and one supplementary group for
the first), and removes them afterwards; :func:`shared_dir` is a directory every user can enter but not list (0711),
under which a state directory's jobs can reach their own directories. Without root the tests skip and say why.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from common.owners import Owner


def require_root() -> None:
    if os.getuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd: these tests create Unix users (CI runs as root)")


@contextmanager
def unix_users(*roles: str) -> Iterator[dict[str, Owner]]:
    """One new user per role (``alice``, ``bob``: names unique to this process), the first also in a new group."""
    require_root()
    tag = f"{os.getpid() % 100000}{secrets.token_hex(2)}"
    group = f"clg{tag}"
    names = {role: f"cl{role[:4]}{tag}" for role in roles}
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    made: list[str] = []
    try:
        for n, name in enumerate(names.values()):
            extra = ["-G", group] if n == 0 else []
            subprocess.run(["useradd", "-M", "-d", f"/home/{name}", "-s", "/bin/sh", *extra, name], check=True,
                           capture_output=True)
            made.append(name)
        yield {role: Owner.of_name(name) for role, name in names.items()}
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)


@contextmanager
def shared_dir() -> Iterator[Path]:
    """A new directory under /tmp that every user may enter but not list (pytest's own tmp_path is root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="colocate-owners-", dir="/tmp"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
