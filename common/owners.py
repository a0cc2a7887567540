"""Whose rights a job runs with: its owner's identity (:class:`Owner`) and the rule that decides it (:func:`may_run_as`).

A server that runs every job as itself hands each submitter the server's rights (as root: root). The rule:

============================  =====================================================================================
``users`` (``colocate serve``) a job of ``owner`` runs ...
============================  =====================================================================================
``own`` (the default)          as the server's user when the owner *is* the server's user; any other owner's job is
                               refused (a server serves its own user only)
``multi``                      as its owner: uid, gid and supplementary groups, ``HOME``/``USER``/``LOGNAME`` — the
                               server must run as root (the only user that can switch) on a backend that can switch
                               (local, slurm; never ray)
``single``                     as the server's user, whoever submitted it: the operator declares that the server's
                               users share its account (refused as root: that would hand every submitter root)
============================  =====================================================================================

A job therefore never runs with more rights than its owner unless the operator said ``single``, and then with the
rights of the unprivileged account the operator chose. The switch happens in the job's own process, after it
joined its cgroup (:mod:`common.contain`: moving a process into a cgroup needs the rights the job must not keep),
before it runs anything of the job's (:func:`drop_to`).
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

USERS_MODES = ("own", "multi", "single")
RUN_SELF = "self"
RUN_OWNER = "owner"
REFUSE = "refuse"


@dataclass(frozen=True)
class Owner:
    """A Unix identity a job runs as: uid, primary gid, supplementary groups, name and home directory."""

    uid: int
    gid: int
    name: str
    groups: tuple[int, ...] = ()
    home: str = "/"

    @classmethod
    def of_uid(cls, uid: int) -> "Owner":
        """The account of ``uid`` from the user database (``pwd``, ``os.getgrouplist``); KeyError if it has none."""
        entry = pwd.getpwuid(uid)
        groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
        return cls(uid, entry.pw_gid, entry.pw_name, groups, entry.pw_dir or "/")

    @classmethod
    def of_name(cls, name: str) -> "Owner":
        return cls.of_uid(pwd.getpwnam(name).pw_uid)

    def to_dict(self) -> dict[str, Any]:
        return {"uid": self.uid, "gid": self.gid, "name": self.name, "groups": list(self.groups), "home": self.home}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Owner":
        return cls(int(data["uid"]), int(data["gid"]), str(data["name"]), tuple(int(g) for g in data["groups"]),
                   str(data.get("home") or "/"))

    def arg(self) -> str:
        """``UID:GID:G1,G2`` (the reaper's ``--user``)."""
        return f"{self.uid}:{self.gid}:{','.join(map(str, self.groups))}"

    @classmethod
    def from_arg(cls, text: str) -> "Owner":
        uid, gid, groups = text.split(":")
        return cls(int(uid), int(gid), uid, tuple(int(g) for g in groups.split(",") if g))

    def environment(self) -> dict[str, str]:
        """What a login as this user would set: the job sees its owner's home and name, not the server's."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name}


@dataclass(frozen=True)
class RunAs:
    """The rule's answer: run the job as the server itself, as its owner, or refuse it (``reason``: one line)."""

    kind: str  # self | owner | refuse
    reason: str = ""


def may_run_as(server_uid: int, owner_uid: int, users: str = "own", *, can_switch: bool = True,
               backend: str = "local") -> RunAs:
    """Whether, and as whom, a job of ``owner_uid`` runs on a server of ``server_uid`` in mode ``users`` (the module
    docstring's table). ``can_switch``: the backend can start a process as another user (Ray cannot)."""
    if owner_uid == server_uid:
        return RunAs(RUN_SELF)
    if users == "single":
        return RunAs(RUN_SELF)
    if users == "multi" and server_uid == 0 and can_switch:
        return RunAs(RUN_OWNER)
    if users == "multi" and not can_switch:
        return RunAs(REFUSE, f"the {backend} backend cannot run a job as its owner (uid {owner_uid})")
    if users == "multi":
        return RunAs(REFUSE, f"the server runs as uid {server_uid}, not root: it cannot run a job as uid {owner_uid}")
    return RunAs(REFUSE, f"this server (uid {server_uid}) runs its own user's jobs only, not uid {owner_uid}'s "
                         "(serve as root with --users multi to run each job as its owner, or --users single)")


def serve_refusal(users: str, server_uid: int, backend: str) -> str | None:
    """Why ``colocate serve --users USERS`` cannot run here (None: it can): checked before the first write."""
    if users == "multi" and backend == "ray":
        return ("the ray backend cannot run jobs as their owners: Ray runs every task as the user who started the Ray "
                "cluster (no per-task uid) and its API has no authentication")
    if users == "multi" and server_uid != 0:
        return f"running each job as its owner needs root; the server runs as uid {server_uid}"
    if users == "single" and server_uid == 0:
        return "--users single runs every job as the server's user: as root that hands every submitter root"
    return None


def drop_to(owner: Owner) -> None:
    """Become ``owner`` for good (in a child before exec): groups, then gid, then uid (after setuid nothing else
    could be changed), and a umask that keeps the job's new files its owner's alone."""
    os.setgroups(list(owner.groups) or [owner.gid])
    os.setresgid(owner.gid, owner.gid, owner.gid)
    os.setresuid(owner.uid, owner.uid, owner.uid)
    os.umask(0o077)


def give_to(path: Path, owner: Owner, mode: int) -> None:
    """``path`` (a file or directory the server made) becomes ``owner``'s with ``mode``. Changed through an open
    descriptor of ``path`` itself (``O_NOFOLLOW``): a symbolic link the job put there in the meantime is never
    followed, and a hard link (another file's name: perhaps one the owner must not get) is refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        give_fd(fd, owner, mode)
    finally:
        os.close(fd)


def give_fd(fd: int, owner: Owner, mode: int) -> None:
    """The open file or directory ``fd`` becomes ``owner``'s with ``mode`` (a file with other names is refused)."""
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise PermissionError(f"not handing a file with {st.st_nlink} names to {owner.name}")
    os.fchown(fd, owner.uid, owner.gid)
    os.fchmod(fd, mode)


def reachable_by(path: Path, owner: Owner) -> Path | None:
    """The first directory above ``path`` that ``owner`` cannot enter (no search permission), or None: a job whose
    directory cannot be reached fails at its first write, so its start says why instead."""
    for parent in reversed(Path(path).absolute().parents):
        try:
            st = parent.stat()
        except OSError:
            return parent
        if st.st_uid == owner.uid:
            bit = 0o100
        elif st.st_gid == owner.gid or st.st_gid in owner.groups:
            bit = 0o010
        else:
            bit = 0o001
        if not st.st_mode & bit:
            return parent
    return None
