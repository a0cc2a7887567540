"""Exactly once, whatever dies (local backend, real processes): a stale copy of a group is fenced by the
job's generation file (it kills its own trainer and writes no exit record), and killing the supervisor,
the trainer and the server in turn still ends with one completion and never two trainers at a time."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from scheduler.executor.registry import make_executor
from scheduler.executor.supervise import EXIT_FILE, process_alive, read_json, spawn_supervisor
from scheduler.model.cluster import cluster_from_dict
from scheduler.service.config import ServeConfig
from scheduler.service.jobs.jobspec import job_from_dict
from scheduler.service.server import Server
from scheduler.service.state.store import StateStore
from tests.serve_helpers import kill_groups, wait_until
from tests.test_serve_local import CONTRACT


def _doc(tmp_path: Path, key: str, job_dir: Path) -> Path:
    doc = {"key": key, "sharing": "timeslice", "gpu": False, "grace_s": 5, "pid_file": str(tmp_path / f"{key}.pid"),
           "jobs": [{"name": "j", "dir": str(job_dir), "env": {},
                     "argv": [sys.executable, "-c", "import time; time.sleep(120)"]}]}
    path = tmp_path / f"{key}.json"
    path.write_text(json.dumps(doc))
    return path


def _trainer(pid_file: Path) -> tuple[int, int | None] | None:
    recorded = read_json(pid_file) or {}
    job = (recorded.get("jobs") or {}).get("j")
    return (int(job[0]), job[1]) if job else None


def test_a_stale_copy_of_a_group_kills_its_trainer_and_writes_no_exit(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    old = spawn_supervisor(_doc(tmp_path, "g00001", job_dir))
    try:
        wait_until(lambda: _trainer(tmp_path / "g00001.pid") is not None, 60, "the first trainer", 0.2)
        first = _trainer(tmp_path / "g00001.pid")
        new = spawn_supervisor(_doc(tmp_path, "g00002", job_dir))  # the server started the job again
        wait_until(lambda: not process_alive(*first), 30, "the stale trainer to be killed", 0.2)
        wait_until(lambda: _trainer(tmp_path / "g00002.pid") is not None, 60, "the new trainer", 0.2)
        assert process_alive(*_trainer(tmp_path / "g00002.pid"))
        assert not (job_dir / EXIT_FILE).exists()  # the stale copy's end is not recorded as the job's end
    finally:
        for handle, key in ((old, "g00001"), (locals().get("new"), "g00002")):
            if handle and process_alive(handle["pid"], handle["start_time"]):
                os.kill(handle["pid"], signal.SIGKILL)
            trainer = _trainer(tmp_path / f"{key}.pid")
            if trainer and process_alive(*trainer):
                os.killpg(trainer[0], signal.SIGKILL)


def _live_trainers(state: StateStore) -> int:
    live = 0
    for pid_file in (state.dir / "runs").glob("*.pid"):
        recorded = read_json(pid_file) or {}
        live += sum(process_alive(int(pid), start) for pid, start in (recorded.get("jobs") or {}).values())
    return live


@pytest.mark.slow
def test_killing_the_supervisor_the_trainer_and_the_server_in_turn_completes_once(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(CONTRACT)
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
    config = ServeConfig(round_s=0.5, device="cpu", stop_grace_s=5)
    state = StateStore(tmp_path / "state")
    server = Server(state, cluster, make_executor("local"), config)
    server.acquire()
    state.submit(job_from_dict({"name": "u", "command": f"python {script}", "application": "mine", "steps": 1500,
                                "batch_size": 4, "max_retries": 5}))
    most = [0]

    def rounds_until(predicate, what: str) -> None:
        def step() -> bool:
            server.round()
            most[0] = max(most[0], _live_trainers(state))
            return predicate()
        wait_until(step, 240, what, 0.2)

    try:
        for victim in ("supervisor", "trainer", "server"):
            before = state.job("u").step

            def moving(store: StateStore = state, before: int = before) -> bool:
                row = store.job("u")
                recorded = read_json(store.dir / "runs" / f"{row.group_key}.pid") if row.group_key else None
                return row.state == "running" and row.step > before + 20 and "u" in ((recorded or {}).get("jobs") or {})

            rounds_until(moving, f"progress before killing the {victim}")
            recorded = read_json(state.dir / "runs" / f"{state.job('u').group_key}.pid")
            if victim == "supervisor":
                os.kill(recorded["pid"], signal.SIGKILL)
            elif victim == "trainer":
                os.killpg(int(recorded["jobs"]["u"][0]), signal.SIGKILL)
            else:  # a new server on the same state re-adopts the running group
                server._lock.close()
                server = Server(StateStore(state.dir), cluster, make_executor("local"), config)
                server.acquire()
                state = server.state
        rounds_until(lambda: state.job("u").state == "completed", "u to complete")
        assert [e["kind"] for e in state.events("u")].count("completed") == 1
        assert state.job("u").crashes == 2 and state.job("u").step == 1500, state.events("u")
        assert most[0] <= 1  # never two trainers of the job at once
    finally:
        kill_groups(state.dir)


def test_a_member_ignoring_sigterm_is_killed_after_the_grace_and_its_end_recorded(tmp_path: Path) -> None:
    """A job asked to stop alone (its stop file) that ignores SIGTERM is killed once the group's grace has passed,
    by the supervisor run as serve runs it (``python -m``), and its end is recorded as asked; the supervisor itself
    ends cleanly (no traceback): a crash there left the job without an exit record, failed as "group gone"."""
    from scheduler.executor.supervise import STOP_FILE, request_job_stop

    job_dir, ready = tmp_path / "job", tmp_path / "trap-set"
    doc = {"key": "g00001", "sharing": "timeslice", "gpu": False, "grace_s": 0.5,
           "pid_file": str(tmp_path / "g00001.pid"),
           "jobs": [{"name": "j", "dir": str(job_dir), "env": {},
                     "argv": ["sh", "-c", f"trap '' TERM; touch {ready}; sleep 120"]}]}
    group_file = tmp_path / "g00001.json"
    group_file.write_text(json.dumps(doc))
    handle = spawn_supervisor(group_file)
    try:
        wait_until(ready.exists, 60, "the job to ignore SIGTERM", 0.1)  # no race with the trap: it is set
        request_job_stop(job_dir)
        assert (job_dir / STOP_FILE).exists()
        wait_until(lambda: not process_alive(handle["pid"], handle["start_time"]), 60, "the supervisor to end", 0.2)
        ended = read_json(job_dir / EXIT_FILE)
        assert ended is not None and ended["stop_requested"] is True and ended["returncode"] != 0, ended
        log = group_file.with_suffix(".log").read_text()
        assert "Traceback" not in log, log
    finally:
        if process_alive(handle["pid"], handle["start_time"]):
            os.kill(handle["pid"], signal.SIGKILL)
        trainer = _trainer(tmp_path / "g00001.pid")
        if trainer and process_alive(*trainer):
            os.killpg(trainer[0], signal.SIGKILL)
