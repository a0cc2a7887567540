"""Everything a job starts is contained and stopped with it (common/contain.py): a child that left the job's session
with ``setsid`` does not outlive the job — in a cgroup of the job's own where the cgroup v2 hierarchy is writable,
by the reaper's subreaper tree where it is not — and a ``colocate serve`` group's jobs run contained."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.contain import cgroup_pids, make_cgroup, remove_cgroup


def _marker() -> str:
    """A ``sleep`` argument no other process on this machine has."""
    return f"{random.randint(500, 999)}.{random.randint(10**8, 10**9)}"


def _sleepers(marker: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"^sleep {marker}$"], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def _wait_gone(marker: str, timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while _sleepers(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _sleepers(marker)


def _escaping_job(marker: str, status: int = 0) -> list[str]:
    """A job that starts a child in a session of its own (outside its process group), then exits."""
    return ["bash", "-c", f"setsid sleep {marker} & sleep 0.3; exit {status}"]


@pytest.mark.parametrize("cgroup", [False, True], ids=["subreaper", "cgroup"])
def test_a_setsid_child_does_not_outlive_its_job(tmp_path: Path, cgroup: bool) -> None:
    group = make_cgroup(f"test-{os.getpid()}-{random.randint(0, 10**9)}") if cgroup else None
    if cgroup and group is None:
        pytest.skip("no writable cgroup v2 hierarchy here")
    marker = _marker()
    try:
        contained = ["--cgroup", str(group)] if group is not None else []
        done = subprocess.run([sys.executable, "-m", "common.contain", str(os.getpid()), *contained, "--",
                               *_escaping_job(marker, 3)], start_new_session=True, timeout=60)
        assert done.returncode == 3  # the job's own status
        assert not _wait_gone(marker)
        if group is not None:
            assert cgroup_pids(group) == []
    finally:
        for pid in _sleepers(marker):
            os.kill(pid, 9)
        remove_cgroup(group)


def test_a_killed_reaper_parent_takes_the_escaped_child_with_it(tmp_path: Path) -> None:
    """The reaper's parent (a group's supervisor) dies with SIGKILL while the job and its escaped child run: the
    reaper's parent-death signal kills both."""
    marker = _marker()
    parent = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-m', 'common.contain', str(os.getpid()), '--', 'bash', '-c', "
        f"'setsid sleep {marker} & sleep 600'], start_new_session=True)\n"
        "time.sleep(600)\n")], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not _sleepers(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _sleepers(marker), "the job did not start its child"
        parent.kill()
        parent.wait()
        assert not _wait_gone(marker)
    finally:
        for pid in _sleepers(marker):
            os.kill(pid, 9)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stopped", "ends"])
def test_a_serve_groups_escaped_child_stops_with_its_group(tmp_path: Path, how: str) -> None:
    """``colocate serve`` on the local backend: a job starts a ``setsid`` child; when the server stops the group
    (a move, a cancel) or the job ends by itself, no such process remains."""
    from dataclasses import replace

    from scheduler.executor.registry import make_executor
    from scheduler.model.cluster import cluster_from_dict
    from scheduler.service.config import LIVE_ILP, ServeConfig
    from scheduler.service.jobs.jobspec import job_from_dict
    from scheduler.service.server import Server
    from scheduler.service.state.store import StateStore
    from tests.serve_helpers import kill_groups, wait_until

    marker = _marker()
    state = StateStore(tmp_path / "state")
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
    server = Server(state, cluster, make_executor("local"),
                    ServeConfig(round_s=0.5, device="cpu", stop_grace_s=5, ilp=replace(LIVE_ILP)))
    server.acquire()
    tail = "sleep 600" if how == "stopped" else "sleep 1; exit 0"
    try:
        state.submit(job_from_dict({"name": "e", "command": f"setsid sleep {marker} & {tail}", "application": "mine",
                                    "steps": 5, "batch_size": 4}))

        def started() -> bool:
            server.round()
            return bool(_sleepers(marker))

        wait_until(started, 120, "the job to start its child", 0.3)
        if how == "stopped":
            server.stop_groups((state.job("e").group_key,))
        else:
            def ended() -> bool:
                server.round()
                return not state.groups()

            wait_until(ended, 120, "the job's group to end", 0.3)
        assert not _wait_gone(marker)
    finally:
        kill_groups(state.dir)
        for pid in _sleepers(marker):
            os.kill(pid, 9)


def test_two_cgroups_of_one_name_never_meet() -> None:
    """Group keys repeat across state directories (every server's first group is g00001): a second cgroup of the same
    name is another cgroup, and making it kills nothing of the first's."""
    first = make_cgroup("g00001-partner")
    if first is None:
        pytest.skip("no writable cgroup v2 hierarchy here")
    sleeper = subprocess.Popen(["sleep", _marker()])
    try:
        (first / "cgroup.procs").write_text(str(sleeper.pid))
        second = make_cgroup("g00001-partner")
        assert second is not None and second != first
        assert sleeper.poll() is None and cgroup_pids(first) == [sleeper.pid]
        remove_cgroup(second)
    finally:
        sleeper.kill()
        sleeper.wait()
        remove_cgroup(first)


def test_a_job_killed_by_sigkill_ends_its_reaper_by_sigkill() -> None:
    """The supervisor records the job's own status: a job killed by SIGKILL is -9, not the reaper's failure."""
    done = subprocess.run([sys.executable, "-m", "common.contain", str(os.getpid()), "--", "bash", "-c", "kill -9 $$"],
                          start_new_session=True, timeout=60, capture_output=True, text=True)
    assert done.returncode == -9, done.stderr
