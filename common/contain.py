"""Everything a job starts stays with it and stops with it:
``python -m common.contain PARENT [--cgroup DIR] [--user UID:GID:GROUPS] -- ARGV``.

A job's command may start processes that leave its process group (``setsid``, a daemon's double fork): a signal to
the group misses them, and they would outlive the job on GPUs another group owns by then. The *reaper* (this
module run as a program) runs the job and keeps hold of all of it:

* in a cgroup v2 of its own where the hierarchy is writable (:func:`make_cgroup`): the job's process joins it
  before it runs anything, so every descendant is in it whatever session or parent it ends up with; stopping kills
  the cgroup (:func:`kill_cgroup`: ``cgroup.kill``, else every pid of ``cgroup.procs`` until none is left);
* everywhere, as a child subreaper (``PR_SET_CHILD_SUBREAPER``): a descendant orphaned by its parent is re-parented
  to the reaper instead of init, so the reaper's process tree holds the whole job; stopping kills that tree
  (:func:`kill_tree`).

The reaper leads the job's process group and ends once the job's own process and the rest of its group have ended,
after killing whatever the job left outside the group, with the status of the job's own process (a job killed by
signal N ends the reaper by signal N). Its parent's death (``PR_SET_PDEATHSIG``) and SIGUSR1 (its supervisor's kill
after the grace) make it kill everything, itself last.
SIGTERM does not stop the reaper: the job gets it through the process group and decides.

With ``--user`` the job's process joins its cgroup and *then* becomes that user (uid, gid, supplementary groups,
umask 077: :func:`common.owners.drop_to`) before it runs anything of the job's; the reaper keeps the server's rights,
so the cgroup, the subreaper tree and the kills hold whatever the job does as its owner.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from common.owners import Owner, drop_to

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
KILL_ROUNDS = 50  # a forking job can add processes while they are killed: kill again until none is left


def cgroup_dir(proc: Path = Path("/proc/self")) -> Path | None:
    """This process's cgroup v2 directory (the unified hierarchy's mount point plus its path), or None."""
    try:
        mounts = (proc / "mountinfo").read_text().splitlines()
        groups = (proc / "cgroup").read_text().splitlines()
    except OSError:
        return None
    mount = next((line.split()[4] for line in mounts if " - cgroup2 " in line), None)
    path = next((line[3:] for line in groups if line.startswith("0::")), None)
    if mount is None or path is None:
        return None
    return Path(mount) / path.lstrip("/")


def make_cgroup(name: str, parent: Path | None = None) -> Path | None:
    """A new cgroup ``colocate-<pid>-<name>-<n>`` under this process's own (``pid``: this process, so names never
    meet across servers and tests on one machine), or None where the cgroup v2 hierarchy is absent or not writable
    here (then the reaper's subreaper tree contains the job alone). Empty ones left by a process that died without
    removing them are removed first; a cgroup that exists is never reused (another process's jobs may be in it)."""
    base = parent if parent is not None else cgroup_dir()
    if base is None or not os.access(base / "cgroup.procs", os.W_OK):
        return None
    _remove_stale(base)
    for n in range(100):
        path = base / f"colocate-{os.getpid()}-{name}-{n}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError:
            return None
        return path if (path / "cgroup.procs").exists() else None
    return None


def _remove_stale(base: Path) -> None:
    """Remove the empty cgroups a dead process made here (``colocate-<pid>-...``, that pid gone)."""
    with contextlib.suppress(OSError):
        for path in base.glob("colocate-*"):
            owner = path.name.split("-")[1]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists() and not cgroup_pids(path):
                with contextlib.suppress(OSError):
                    path.rmdir()


def join_cgroup(path: Path) -> None:
    """Move the calling process into ``path`` (a failure leaves it where it was: the tree still contains it)."""
    with contextlib.suppress(OSError), open(path / "cgroup.procs", "w") as procs:
        procs.write("0")


def cgroup_pids(path: Path) -> list[int]:
    try:
        return [int(line) for line in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill_cgroup(path: Path | None) -> None:
    """SIGKILL every process of the cgroup at ``path`` until none is left."""
    if path is None:
        return
    if (path / "cgroup.kill").exists():  # Linux 5.14: the kernel kills them all, forks in flight included
        with contextlib.suppress(OSError), open(path / "cgroup.kill", "w") as kill:
            kill.write("1")
    _kill_until_none(lambda: cgroup_pids(path))


def remove_cgroup(path: Path | None, timeout_s: float = 5.0) -> None:
    """Kill what is left in the cgroup and remove it (it can be removed once its processes have gone)."""
    if path is None:
        return
    kill_cgroup(path)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)


def descendants(root: int, group: int | None = None) -> list[int]:
    """Every live process below ``root`` in the process tree (from ``/proc``); with ``group``, those of that
    process group only."""
    children: dict[int, list[int]] = {}
    groups: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            groups[int(entry.name)] = int(fields[2])
    found, queue = [], list(children.get(root, []))
    while queue:
        pid = queue.pop()
        found.append(pid)
        queue.extend(children.get(pid, []))
    return [pid for pid in found if group is None or groups.get(pid) == group]


def kill_tree(root: int) -> None:
    """SIGKILL every descendant of ``root`` (this process: reap them too) until none is left."""
    _kill_until_none(lambda: descendants(root), between=_reap)
    _reap()


def _kill_until_none(listed: Callable[[], Iterable[int]], between: Callable[[], None] = lambda: None) -> None:
    """SIGKILL every pid ``listed()`` names, again until it names none: a forking job adds processes while they
    die (at most :data:`KILL_ROUNDS` times; ``between``: after each round, e.g. reaping our own children)."""
    for _ in range(KILL_ROUNDS):
        pids = list(listed())
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
        between()


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value)


def _job_start(cgroup: Path | None, user: Owner | None) -> Callable[[], None] | None:
    """What the job's process does before it runs the job: join its cgroup (with the reaper's rights), then become
    its owner (the order matters: once it is the owner, it may not move itself into a cgroup)."""
    if cgroup is None and user is None:
        return None

    def start() -> None:
        if cgroup is not None:
            join_cgroup(cgroup)
        if user is not None:
            drop_to(user)  # an error here fails the start: the job never runs with the reaper's rights

    return start


def main(argv: list[str]) -> int:
    """The reaper: ``PARENT [--cgroup DIR] [--user UID:GID:GROUPS] -- ARGV`` (PARENT: the pid it dies with)."""
    parent, rest = int(argv[0]), argv[1:]
    options = rest[:rest.index("--")]
    command = rest[rest.index("--") + 1:]
    cgroup = Path(options[options.index("--cgroup") + 1]) if "--cgroup" in options else None
    user = Owner.from_arg(options[options.index("--user") + 1]) if "--user" in options else None

    def kill_everything(*_: object) -> None:
        kill_cgroup(cgroup)
        kill_tree(os.getpid())
        os.killpg(0, signal.SIGKILL)  # the job's process group, the reaper with it

    signal.signal(signal.SIGUSR1, kill_everything)
    _prctl(PR_SET_PDEATHSIG, signal.SIGUSR1)
    if os.getppid() != parent:  # the parent died before the signal was asked for
        return 1
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGTERM, lambda *_: None)  # the job gets it too (same group) and decides
    job = subprocess.Popen(command, preexec_fn=_job_start(cgroup, user))
    code = job.wait()
    # the job is its process group: a shell's trainer may still be writing its checkpoint after a SIGTERM ended the
    # shell. Once the group is gone, what the job left outside it (an escaped child, a daemon it started) is killed.
    while descendants(os.getpid(), group=os.getpgrp()):
        _reap()
        time.sleep(0.05)
    kill_cgroup(cgroup)
    kill_tree(os.getpid())
    if code < 0:  # end by the job's signal, so whoever waits for the reaper sees the job's own status
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP keep their default (and cannot be set)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
