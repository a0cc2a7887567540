"""Who calls, and what they may do.

On the Unix socket the kernel names the caller (``SO_PEERCRED``: the uid, gid and pid of the process that
connected; no client can forge them). Over HTTP a bearer token names a user (:mod:`.tokens`). Either way the
caller is a :class:`Caller`; :func:`is_admin` says whether they may act on every job: root, the server's own
user, and the users and ``@groups`` named by ``--admin``.
"""

from __future__ import annotations

import grp
import os
import pwd
import socket
import struct
from dataclasses import dataclass

from scheduler.service.state.store import JobOwner


@dataclass(frozen=True)
class Caller:
    """One request's caller: user name and uid, primary gid, every group's name, and how they were identified."""

    name: str
    uid: int
    gid: int
    groups: frozenset[str]
    via: str  # "socket (pid N)" or "token ID"

    @property
    def owner(self) -> JobOwner:
        return JobOwner(self.name, self.uid)

    def __str__(self) -> str:
        return f"{self.name} (uid {self.uid}, {self.via})"


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket, from the kernel."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid without a passwd entry (a container): its number names it
        return str(uid)


def group_names(name: str, gid: int) -> frozenset[str]:
    """The groups of user ``name``: the primary one (``gid``) and those listing them as a member."""
    names = set()
    try:
        names.add(grp.getgrgid(gid).gr_name)
    except KeyError:
        pass
    names.update(g.gr_name for g in grp.getgrall() if name in g.gr_mem)
    return frozenset(names)


def from_peer(pid: int, uid: int, gid: int) -> Caller:
    name = user_name(uid)
    return Caller(name, uid, gid, group_names(name, gid), f"socket, pid {pid}")


def from_user(name: str, via: str) -> Caller | None:
    """The caller a token names (None: the user no longer exists)."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return Caller(name, entry.pw_uid, entry.pw_gid, group_names(name, entry.pw_gid), via)


def is_admin(caller: Caller, admins: tuple[str, ...]) -> bool:
    """Root, the server's own user, a named admin user, or a member of a named admin ``@group``."""
    if caller.uid in (0, os.geteuid()):
        return True
    return caller.name in admins or any(a.startswith("@") and a[1:] in caller.groups for a in admins)


def may_touch(caller: Caller, owner_uid: int, admins: tuple[str, ...]) -> bool:
    """Whether ``caller`` may cancel, change or read a job owned by ``owner_uid``: its owner, or an admin."""
    return caller.uid == owner_uid or is_admin(caller, admins)
