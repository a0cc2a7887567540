"""The server never dies for one job: each hostile job of the hardening issue is written straight into the
database (behind ``submit``'s validator) next to a good job; the server (local backend, real processes,
real SQLite) must fail the hostile job with the reason — or, for a job the cluster cannot run, keep it
waiting with the reason — and still complete the good one."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from scheduler.executor.registry import make_executor
from scheduler.model.cluster import cluster_from_dict
from scheduler.service.config import ServeConfig
from scheduler.service.jobs.jobspec import job_from_dict
from scheduler.service.server import Server
from scheduler.service.state.store import StateStore
from tests.serve_helpers import kill_groups, wait_until

GOOD = {"name": "good", "command": "echo done", "application": "mine", "steps": 1, "batch_size": 4}
BAD = {"name": "bad", "command": "echo hi", "application": "mine", "steps": 1, "batch_size": 4}
HOSTILE = {  # what each case changes in BAD, as stored JSON
    "name-dotdot": {"name": ".."}, "name-dash": {"name": "-rf"}, "batch-huge": {"batch_size": 1_000_000_000_000},
    "format-type": {"command": "run {job:d}"}, "format-width": {"command": "run {batch_size:>2000000000}"},
    "steps-huge": {"steps": 1e30}, "image-huge": {"image_size": 1e9}, "retries-huge": {"max_retries": 1e18},
    "gpus-million": {"min_gpus": 1_000_000}, "unknown-key": {"colour": "red"}, "not-json": "{not json",
    "name-mismatch": {"name": "other"},
}


def _server(tmp_path: Path) -> tuple[StateStore, Server]:
    state = StateStore(tmp_path / "state")
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}}})
    server = Server(state, cluster, make_executor("local"), ServeConfig(round_s=0.5, device="cpu", stop_grace_s=5))
    server.acquire()
    return state, server


def _insert(state: StateStore, name: str, spec: object) -> None:
    """A row as submit would write it, but with any spec text (the validator never sees it)."""
    text = spec if isinstance(spec, str) else json.dumps(spec)
    with sqlite3.connect(state.path) as conn:
        seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
        conn.execute("INSERT INTO jobs (name, spec, state, submitted_at, seq) VALUES (?, ?, 'queued', ?, ?)",
                     (name, text, time.time(), seq))


def _rounds_until(server: Server, state: StateStore, predicate, what: str) -> None:
    def step() -> bool:
        server.round()
        return predicate()

    wait_until(step, 120, what, interval_s=0.2)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_stored_job_fails_alone_and_the_others_complete(tmp_path: Path, case: str) -> None:
    state, server = _server(tmp_path)
    try:
        change = HOSTILE[case]
        spec = change if isinstance(change, str) else {**BAD, **change}
        name = spec["name"] if isinstance(spec, dict) and case != "name-mismatch" else "bad"
        _insert(state, name, spec)
        state.submit(job_from_dict(GOOD))
        _rounds_until(server, state, lambda: state.job("good").state == "completed", "the good job to complete")
        row = state.job(name)
        assert row.state == "failed" and row.error, row
        assert any(e["kind"] == "failed" for e in state.events(name))
    finally:
        kill_groups(state.dir)


@pytest.mark.parametrize("change, reason", [({"gpu_types": ["v100"]}, "no GPU of type v100"),
                                            ({"min_gpus": 64}, "needs 64 GPUs")])
def test_a_job_the_cluster_cannot_run_waits_with_the_reason(tmp_path: Path, change: dict, reason: str) -> None:
    state, server = _server(tmp_path)
    try:
        _insert(state, "bad", {**BAD, **change})
        state.submit(job_from_dict(GOOD))
        _rounds_until(server, state, lambda: state.job("good").state == "completed", "the good job to complete")
        row = state.job("bad")
        assert row.state == "queued" and reason in row.error and row.error.startswith("waiting: ")
    finally:
        kill_groups(state.dir)


def test_a_group_that_cannot_be_built_fails_its_job_and_the_server_goes_on(tmp_path: Path) -> None:
    state, server = _server(tmp_path)
    try:
        state.submit(job_from_dict(BAD))
        (state.dir / "jobs").mkdir()
        (state.dir / "jobs" / "bad").write_text("a file where the job's directory goes")
        state.submit(job_from_dict(GOOD))
        _rounds_until(server, state, lambda: state.job("good").state == "completed", "the good job to complete")
        row = state.job("bad")
        assert row.state == "failed" and "cannot start" in row.error, row
    finally:
        kill_groups(state.dir)


@pytest.mark.slow
def test_a_malformed_progress_file_is_the_jobs_misbehaviour(tmp_path: Path) -> None:
    """Progress a user command wrote that is not progress (text for numbers) is not ignored: the job is stopped,
    retried and failed with the file named, and the good job completes (more shapes: test_serve_chaos.py)."""
    state, server = _server(tmp_path)
    try:
        writes = ('printf \'{{"step": "many", "samples": [1], "state": "running", "elapsed_s": "x"}}\' '
                  '> "$COLOCATE_PROGRESS_FILE"; sleep 30')
        state.submit(job_from_dict({**BAD, "command": writes, "max_retries": 1}))
        state.submit(job_from_dict(GOOD))
        _rounds_until(server, state, lambda: state.job("bad").state in ("completed", "failed")
                      and state.job("good").state == "completed", "both jobs to end")
        row = state.job("bad")
        assert row.state == "failed" and row.crashes == 2 and "misbehaved: progress.json: field 'step'" in row.error
        assert [e["kind"] for e in state.events("bad")].count("bad-file") == 2
    finally:
        kill_groups(state.dir)


@pytest.mark.slow
def test_a_progress_record_caught_half_written_once_is_not_misbehaviour(tmp_path: Path) -> None:
    """A command that writes its progress in place (not atomically) may be read mid-write: one bad look is
    judged again at the next; the job completes."""
    state, server = _server(tmp_path)
    try:
        writes = ('printf \'{{"step": 1,\' > "$COLOCATE_PROGRESS_FILE"; sleep 0.6; '  # a slow writer, caught mid-record
                  'printf \'{{"step": 1, "samples": 4, "state": "finished"}}\' > "$COLOCATE_PROGRESS_FILE"')
        state.submit(job_from_dict({**GOOD, "command": writes}))
        looked = []

        def step() -> bool:
            server.round()
            looked.append(set(server._bad_look))
            return state.job("good").state in ("completed", "failed")

        wait_until(step, 120, "the job to end", interval_s=0.2)
        assert any("good" in seen for seen in looked)  # the empty file was seen once ...
        row = state.job("good")
        assert row.state == "completed" and row.crashes == 0, row  # ... and not held against the job
        assert "bad-file" not in [e["kind"] for e in state.events("good")]
    finally:
        kill_groups(state.dir)


@pytest.mark.slow
@pytest.mark.parametrize("record, text", [
    ("$COLOCATE_PROGRESS_FILE", '{"step": 1' + "0" * 400 + ', "state": "running"}'),
    ("$COLOCATE_PROGRESS_FILE", '{"step": 1, "samples": 1e400, "state": "running"}'),
    ("$COLOCATE_OOM_FILE", '{"reached_bytes": 1' + "0" * 5000 + "}"),
])
def test_a_huge_number_in_a_record_fails_its_job_and_rounds_go_on(tmp_path: Path, record: str, text: str) -> None:
    """One number beyond a float or beyond Python's 4,300-digit limit once made every round fail (the round
    counter froze, finished jobs stayed "running"): it is the writer's misbehaviour, and the good job completes."""
    state, server = _server(tmp_path)
    try:
        (tmp_path / "record.json").write_text(text)
        writes = f'cp {tmp_path / "record.json"} "{record}"; sleep 3; exit 1'
        state.submit(job_from_dict({**BAD, "command": writes, "max_retries": 0}))
        state.submit(job_from_dict(GOOD))
        _rounds_until(server, state, lambda: state.job("bad").state in ("completed", "failed")
                      and state.job("good").state == "completed", "both jobs to end")
        row = state.job("bad")
        assert row.state == "failed" and "field '" in row.error and "inf" in row.error, row.error
        assert state.job("good").state == "completed"
    finally:
        kill_groups(state.dir)
