"""Jobs run as their owners (``colocate serve --users multi`` as root): the rule, and what an attacker's job can do.

Real users (:mod:`tests.unix_users`, root only; CI runs as root): alice's job process has alice's uid, gid and
groups (``/proc/PID/status``), no capabilities, her HOME/USER; her directory, log and files are hers, 0700/0600;
she cannot list, read or write bob's job directory, read ``/etc/shadow`` or signal her root reaper; the reaper
still holds and kills whatever she starts. Jobs are ``sh`` scripts: another user cannot run root's Python.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from common.errors import InputError
from common.owners import REFUSE, RUN_OWNER, RUN_SELF, Owner, may_run_as, reachable_by, serve_refusal
from scheduler.executor.group_doc import GroupDoc
from tests.unix_users import shared_dir, unix_users


@pytest.mark.parametrize("server, owner, users, switch, kind", [
    (1000, 1000, "own", True, RUN_SELF),      # the server's own user: as before
    (0, 0, "own", True, RUN_SELF),
    (1000, 1001, "own", True, REFUSE),        # a server serves its own user only
    (0, 1001, "own", True, REFUSE),           # root too, unless told --users multi
    (0, 1001, "multi", True, RUN_OWNER),      # root runs each job as its owner
    (0, 1001, "multi", False, REFUSE),        # ... but not on a backend that cannot switch (Ray)
    (1000, 1001, "multi", True, REFUSE),      # only root can switch
    (1000, 1001, "single", True, RUN_SELF),   # the operator's single-user mode: the server's (unprivileged) user
])
def test_the_rule(server: int, owner: int, users: str, switch: bool, kind: str) -> None:
    decision = may_run_as(server, owner, users, can_switch=switch, backend="ray")
    assert decision.kind == kind
    assert bool(decision.reason) == (kind == REFUSE)


def test_no_mode_runs_a_job_with_more_rights_than_its_owner() -> None:
    """Whatever the mode, a job of another user runs as root only if it is root's: never as the server (root)."""
    for users in ("own", "multi", "single"):
        for owner in (1, 1000, 65534):
            if serve_refusal(users, 0, "local") is None:
                assert may_run_as(0, owner, users).kind != RUN_SELF


@pytest.mark.parametrize("users, uid, backend, refused", [
    ("multi", 0, "ray", True), ("multi", 1000, "local", True), ("single", 0, "local", True),
    ("multi", 0, "local", False), ("multi", 0, "slurm", False), ("own", 0, "ray", False), ("single", 1000, "ray", False),
])
def test_serve_refuses_what_it_cannot_keep(users: str, uid: int, backend: str, refused: bool) -> None:
    assert (serve_refusal(users, uid, backend) is not None) == refused


def test_serve_refuses_multi_user_mode_on_ray_before_anything(tmp_path: Path) -> None:
    from scheduler.service.config import ServeConfig
    from scheduler.service.serve import ServeRequest, serve_forever

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("gpu_types: {t4: {nodes: 1, gpus_per_node: 1, memory_gb: 16}}\n")
    request = ServeRequest(cluster=cluster, state=tmp_path / "state", backend="ray",
                           config=ServeConfig(users="multi", device="cpu"))
    with pytest.raises(InputError, match="ray backend cannot run jobs as their owners"):
        serve_forever(request)
    assert not (tmp_path / "state").exists()


def test_an_unknown_users_mode_is_one_line() -> None:
    from scheduler.service.config import ServeConfig

    with pytest.raises(InputError, match="users"):
        ServeConfig(users="everyone")


def test_a_refused_owner_fails_the_groups_start() -> None:
    from scheduler.service.groups import run_as

    assert run_as(None, "own") is None and run_as(os.getuid(), "own") is None
    with pytest.raises(PermissionError, match="its own user's jobs only"):
        run_as(os.getuid() + 4242, "own")


def _doc(base: Path, jobs: dict[str, tuple[Owner, str]], env: dict[str, str]) -> GroupDoc:
    (base / "runs").mkdir()
    return GroupDoc.from_dict({"key": "g00001", "sharing": "timeslice", "gpu": False, "grace_s": 2, "pid_file": str(base / "runs/g.pid"),
            "jobs": [{"name": name, "dir": str(base / "jobs" / name), "argv": ["/bin/sh", "-c", script],
                      "env": {**env, "COLOCATE_JOB_DIR": str(base / "jobs" / name)}, "memory_limit_bytes": None,
                      "owner": owner.to_dict()} for name, (owner, script) in jobs.items()]})


def _wait_for(path: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


ALICE = """d=$COLOCATE_JOB_DIR
echo $$ > $d/pid
echo "$HOME $USER $LOGNAME $(pwd)" > $d/whoami
echo secret > $d/mine
ls "$BOB" >/dev/null 2>&1; echo "list=$?" >> $d/tries
cat "$BOB/train.log" >/dev/null 2>&1; echo "read=$?" >> $d/tries
touch "$BOB/intruder" 2>/dev/null; echo "write=$?" >> $d/tries
cat /etc/shadow >/dev/null 2>&1; echo "shadow=$?" >> $d/tries
kill -0 $PPID 2>/dev/null; echo "reaper=$?" >> $d/tries
setsid sleep 4242.5 &
touch $d/ready
sleep 600
"""
BOB = 'echo $$ > $COLOCATE_JOB_DIR/pid; touch $COLOCATE_JOB_DIR/ready; sleep 600'


@pytest.mark.slow
def test_alice_runs_as_alice_and_cannot_touch_bobs_job() -> None:
    from scheduler.executor.registry import make_executor

    with unix_users("alice", "bob") as users, shared_dir() as base:
        alice, bob = users["alice"], users["bob"]
        bob_dir = base / "jobs" / "b"
        doc = _doc(base, {"b": (bob, BOB), "a": (alice, ALICE)}, {"BOB": str(bob_dir)})
        executor = make_executor("local")
        handle = executor.start(None, doc)  # type: ignore[arg-type]  # a CPU group: no GPUs to map
        a_dir = base / "jobs" / "a"
        try:
            _wait_for(a_dir / "ready")
            _wait_for(bob_dir / "ready")
            pid = int((a_dir / "pid").read_text())
            status = _status(pid)
            assert status["Uid"].split() == [str(alice.uid)] * 4
            assert status["Gid"].split() == [str(alice.gid)] * 4
            assert sorted(map(int, status["Groups"].split())) == sorted(alice.groups)
            assert len(alice.groups) == 2  # her own group and the extra one
            assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
            assert _status(int((bob_dir / "pid").read_text()))["Uid"].split()[0] == str(bob.uid)
            tries = dict(line.split("=") for line in (a_dir / "tries").read_text().split())
            assert all(code != "0" for code in tries.values()), tries
            assert not (bob_dir / "intruder").exists()
            home, user, logname, cwd = (a_dir / "whoami").read_text().split()
            assert (home, user, logname, cwd) == (alice.home, alice.name, alice.name, str(a_dir))
            for path, mode in ((a_dir, 0o700), (a_dir / "train.log", 0o600), (a_dir / "mine", 0o600),
                               (a_dir / "generation", 0o600), (bob_dir, 0o700)):
                st = path.lstat()
                assert (stat.S_IMODE(st.st_mode), st.st_uid) == (mode, bob.uid if path == bob_dir else alice.uid)
            assert (base / "runs/g.pid").stat().st_uid == 0  # the supervisor is the server's (root)
        finally:
            executor.release(handle, doc)
        deadline = time.monotonic() + 30
        while _sleepers("4242.5") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _sleepers("4242.5"), "alice's setsid child outlived her job"


def _sleepers(marker: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_the_reaper_holds_a_job_that_runs_as_another_user() -> None:
    """``common.contain --user``: the job (and its setsid child) run as the user; once the job ends, the reaper —
    still root — kills the escaped child."""
    with unix_users("alice") as users, shared_dir() as base:
        alice = users["alice"]
        out = base / "out"
        out.mkdir()
        os.chown(out, alice.uid, alice.gid)
        script = f"setsid sleep 4343.5 & id -u > {out}/uid; id -G > {out}/groups"
        done = subprocess.run([sys.executable, "-m", "common.contain", str(os.getpid()), "--user", alice.arg(), "--",
                               "/bin/sh", "-c", script], timeout=60, cwd="/")
        assert done.returncode == 0
        assert (out / "uid").read_text().split() == [str(alice.uid)]
        assert sorted(map(int, (out / "groups").read_text().split())) == sorted(alice.groups)
        assert not _sleepers("4343.5")


def test_a_file_with_another_name_is_never_handed_over(tmp_path: Path) -> None:
    """A job that hard-links a file it must not get under a record's name gets nothing: the server refuses to change
    a file with more than one name."""
    from common.owners import give_to

    secret = tmp_path / "secret"
    secret.write_text("root's")
    os.link(secret, tmp_path / "exit.json")
    before = secret.stat()
    with pytest.raises(PermissionError, match="2 names"):
        give_to(tmp_path / "exit.json", Owner(4242, 4242, "x", (4242,)), 0o600)
    assert (secret.stat().st_uid, secret.stat().st_mode) == (before.st_uid, before.st_mode)


def test_a_directory_the_owner_cannot_reach_is_named() -> None:
    with unix_users("alice") as users, shared_dir() as base:
        hidden = base / "hidden"
        (hidden / "jobs").mkdir(parents=True)
        hidden.chmod(0o700)
        assert reachable_by(hidden / "jobs", users["alice"]) == hidden
        hidden.chmod(0o711)
        assert reachable_by(hidden / "jobs", users["alice"]) is None


def test_a_group_of_several_owners_says_why_it_time_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--users multi --sharing mps``: a unit of alice's and bob's jobs on a type whose MPS serves one user at a time
    is built time-sliced, and says why; one owner's unit keeps MPS; a type the rule closes raises."""
    from scheduler.model.cluster import cluster_from_dict
    from scheduler.service import groups
    from scheduler.service.config import ServeConfig
    from scheduler.service.rounds import Slot

    monkeypatch.setattr(groups, "row_owner", lambda row: (row, None))  # the lead's row.owner: here the row itself
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
    config = ServeConfig(users="multi", sharing="mps", device="cpu")
    unit = (Slot("a", "t4", 1, 4, ("b",), (0,), (0,)), Slot("b", "t4", 1, 4, ("a",), (0,), (0,)))
    owners = groups.owner_planning(cluster, config, "local")
    sharing, why = groups.group_sharing(unit, {"a": "alice", "b": "bob"}, config, owners)  # type: ignore[arg-type]
    assert sharing == "timeslice" and "serves one user at a time" in why
    assert groups.group_sharing(unit, {"a": "alice", "b": "alice"}, config, owners) == ("mps", "")  # type: ignore
    assert groups.owner_planning(cluster, ServeConfig(sharing="mps"), "local").table(None) is None
    assert not groups.owner_planning(cluster, ServeConfig(sharing="mps", device="cpu"), "local").rule.restricts
    with pytest.raises(PermissionError, match="a Slurm job runs as one user"):
        groups.group_sharing(unit, {"a": "alice", "b": "bob"}, config,  # type: ignore[arg-type]
                             groups.owner_planning(cluster, replace(config, sharing="timeslice"), "slurm"))


@pytest.mark.slow
def test_the_server_runs_each_job_as_its_owner(monkeypatch: pytest.MonkeyPatch) -> None:
    """``colocate serve --backend local --users multi`` as root, end to end: with each row's owner
    (:func:`scheduler.service.rounds.row_owner`, set here as the state's owner column will), alice's and bob's jobs
    run as alice and bob."""
    from scheduler.executor.registry import make_executor
    from scheduler.model.cluster import cluster_from_dict
    from scheduler.service import groups, rounds
    from scheduler.service.config import ServeConfig
    from scheduler.service.jobs.jobspec import job_from_dict
    from scheduler.service.server import Server
    from scheduler.service.state.store import StateStore
    from tests.serve_helpers import kill_groups, wait_until

    with unix_users("alice", "bob") as users, shared_dir() as base:
        owner_of = {"ja": users["alice"], "jb": users["bob"]}

        def row_owner(row: Any) -> tuple[str, int | None]:
            return owner_of[row.name].name, owner_of[row.name].uid

        monkeypatch.setattr(groups, "row_owner", row_owner)
        monkeypatch.setattr(rounds, "row_owner", row_owner)
        state = StateStore(base / "state")
        cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}}})
        server = Server(state, cluster, make_executor("local"),
                        ServeConfig(round_s=0.5, device="cpu", stop_grace_s=5, users="multi"))
        server.acquire()
        try:
            for name in owner_of:
                state.submit(job_from_dict({"name": name, "command": "echo $$ > $COLOCATE_JOB_DIR/pid; sleep 600",
                                            "application": "mine", "steps": 5, "batch_size": 4, "exclusive": True}))

            def running() -> bool:
                server.round()
                return all((base / "state/jobs" / n / "pid").exists() for n in owner_of)

            wait_until(running, 120, "both jobs to start", 0.3)
            for name, owner in owner_of.items():
                pid = int((base / "state/jobs" / name / "pid").read_text())
                assert _status(pid)["Uid"].split() == [str(owner.uid)] * 4
                assert (base / "state/jobs" / name).stat().st_uid == owner.uid
        finally:
            kill_groups(state.dir)
            state.close()
