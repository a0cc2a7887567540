"""The live scheduler on the local backend with user commands (real detached processes, real SQLite, the ILP):
the checkpoint-restore contract a user command follows, and crashes retried up to a limit, then failed."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.executor.registry import make_executor
from scheduler.model.cluster import cluster_from_dict
from scheduler.service.config import LIVE_ILP, ServeConfig
from scheduler.service.jobs.jobspec import job_from_dict
from scheduler.service.server import Server
from scheduler.service.state.store import StateStore
from tests.serve_helpers import kill_groups, wait_until

pytestmark = pytest.mark.slow

# A user training command that follows the documented contract: resume from $COLOCATE_CHECKPOINT, count to
# $COLOCATE_TARGET_STEPS, write $COLOCATE_PROGRESS_FILE, and on SIGTERM save the checkpoint and exit 0.
CONTRACT = textwrap.dedent("""
    import json, os, signal, sys, time
    checkpoint, progress = os.environ["COLOCATE_CHECKPOINT"], os.environ["COLOCATE_PROGRESS_FILE"]
    target = int(os.environ["COLOCATE_TARGET_STEPS"])
    step = int(open(checkpoint).read()) if os.path.exists(checkpoint) else 0
    print(f"resumed at step {step} with batch {os.environ['COLOCATE_BATCH_SIZE']}", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *args: stop.append(True))
    def report(state):
        with open(progress + ".tmp", "w") as fh:
            json.dump({"step": step, "samples": step * 4, "state": state, "elapsed_s": time.time() - t0,
                       "restored_step": 0}, fh)
        os.replace(progress + ".tmp", progress)
    t0 = time.time()
    while step < target and not stop:
        step += 1
        time.sleep(0.02)
        report("running")
    open(checkpoint, "w").write(str(step))
    report("finished" if step >= target else "stopped")
""")


def _server(tmp_path: Path, **options: float) -> tuple[StateStore, Server]:
    state = StateStore(tmp_path / "state")
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
    config = ServeConfig(round_s=0.5, device="cpu", stop_grace_s=10, ilp=replace(LIVE_ILP, **options))
    server = Server(state, cluster, make_executor("local"), config)
    server.acquire()
    return state, server


def _run_until(server: Server, predicate, what: str, timeout_s: float = 300.0) -> None:
    def step() -> bool:
        server.round()
        return predicate()

    wait_until(step, timeout_s, what)


def test_a_user_command_is_stopped_resumes_from_its_checkpoint_and_completes(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(CONTRACT)
    state, server = _server(tmp_path)
    try:
        state.submit(job_from_dict({"name": "u", "command": f"python {script}", "application": "mine",
                                    "steps": 400, "batch_size": 4}))
        _run_until(server, lambda: state.job("u").step >= 50, "u to make progress")
        server.stop_groups((state.job("u").group_key,))  # what a move does: SIGTERM, checkpoint, back to the queue
        stopped_at = state.job("u").step
        assert state.job("u").state == "queued" and state.job("u").restarts == 1
        _run_until(server, lambda: state.job("u").state == "completed", "u to complete")
        log = (state.dir / "jobs" / "u" / "train.log").read_text()
        resumed = [int(line.split()[3]) for line in log.splitlines() if line.startswith("resumed at step")]
        assert resumed[0] == 0 and resumed[1] >= stopped_at > 0  # no progress lost beyond the checkpoint
        assert state.job("u").step == 400
    finally:
        kill_groups(state.dir)


def test_a_crashing_job_is_retried_up_to_its_limit_then_failed_with_its_last_log_line(tmp_path: Path) -> None:
    state, server = _server(tmp_path)
    try:
        state.submit(job_from_dict({"name": "bad", "command": "echo loading; echo boom: CUDA error; exit 3",
                                    "application": "mine", "steps": 10, "batch_size": 4, "max_retries": 1}))
        _run_until(server, lambda: state.job("bad").state == "failed", "bad to fail")
        row = state.job("bad")
        assert row.crashes == 2 and "exit status 3" in row.error and "boom: CUDA error" in row.error
        assert [e["kind"] for e in state.events("bad")].count("crashed") == 1
    finally:
        kill_groups(state.dir)


@pytest.mark.parametrize("status", [1, 3])
def test_a_job_that_says_finished_but_exits_non_zero_crashed(tmp_path: Path, status: int) -> None:
    """Its progress file says finished, its exit status says it failed (in its teardown, say): a crash, retried."""
    state, server = _server(tmp_path)
    finish = ('printf \'{{"step": 5, "samples": 20, "state": "finished", "elapsed_s": 1.0}}\' > '
              f'"$COLOCATE_PROGRESS_FILE"; echo teardown failed; exit {status}')
    try:
        state.submit(job_from_dict({"name": "f", "command": finish, "application": "mine", "steps": 5,
                                    "batch_size": 4, "max_retries": 0}))
        _run_until(server, lambda: state.job("f").state in ("completed", "failed"), "f to end")
        row = state.job("f")
        assert row.state == "failed" and f"exit status {status}" in row.error and "teardown failed" in row.error
        assert "completed" not in [e["kind"] for e in state.events("f")]
    finally:
        kill_groups(state.dir)


def test_a_job_that_finished_but_does_not_exit_is_completed_and_its_group_killed(tmp_path: Path) -> None:
    from scheduler.executor.supervise import process_alive, read_json

    state, server = _server(tmp_path)
    server.config = ServeConfig(round_s=0.5, device="cpu", stop_grace_s=2)
    hang = ('printf \'{{"step": 5, "samples": 20, "state": "finished", "elapsed_s": 1.0}}\' > "$COLOCATE_PROGRESS_FILE"; '
            "sleep 600")  # a teardown that never returns (a stuck collective, say)
    try:
        state.submit(job_from_dict({"name": "h", "command": hang, "application": "mine", "steps": 5,
                                    "batch_size": 4}))
        _run_until(server, lambda: state.job("h").state == "completed", "h to complete")
        assert not state.groups() and [e["kind"] for e in state.events("h")].count("completed") == 1
        recorded = read_json(next((state.dir / "runs").glob("*.pid")))
        wait_until(lambda: not process_alive(recorded["pid"], recorded["start_time"]), 60, "its supervisor killed")
        for job_pid, job_start in recorded["jobs"].values():
            wait_until(lambda pid=job_pid, start=job_start: not process_alive(pid, start), 60,
                       "its job's processes killed")
    finally:
        kill_groups(state.dir)


def test_with_no_table_a_pair_is_tried_from_the_prior_and_its_measured_ratios_are_learned(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from colocate.cli import app
    from scheduler.formats.colocation_table import load_colocation_table

    script = tmp_path / "train.py"
    script.write_text(CONTRACT)
    # one GPU, no --colocation, serve's default policy (p = -0.5 with λ = 2, StabilityConfig): the prior and the
    # exploration rule plan the pair, and a waiting job's λ makes sharing the lone GPU worth more than waiting.
    # Restarts of this trainer cost about a second (--restart-cost 1): joining the pair restarts the running
    # job too, which with the default S = 25 s pays only after ~25 s of its run, longer than its 300 steps last
    state, server = _server(tmp_path, restart_cost_s=1.0)
    try:
        state.submit(job_from_dict({"name": "a", "command": f"python {script}", "application": "mine",
                                    "steps": 300, "batch_size": 4}))
        _run_until(server, lambda: state.job("a").step >= 60, "a to run alone (its solo time)")
        state.submit(job_from_dict({"name": "b", "command": f"python {script}", "application": "theirs",
                                    "steps": 700, "batch_size": 4}))
        _run_until(server, lambda: state.job("b").state == "completed", "b to complete")
        events = [e for name in ("a", "b") for e in state.events(name)]
        assert any(" with " in e["detail"] for e in events), events  # the pair was formed (tried)
        shown = CliRunner().invoke(app, ["learned", "--state", str(state.dir)])
        assert shown.exit_code == 0 and "mine@4" in shown.output and "theirs@4" in shown.output, shown.output
        out = tmp_path / "learned.csv"
        written = CliRunner().invoke(app, ["learned", "--state", str(state.dir), "--out", str(out)])
        assert written.exit_code == 0, written.output
        ratios = load_colocation_table(out).ratios[("t4", "mine@4", "theirs@4")]
        assert all(0 < r <= 1.1 for r in ratios)  # measured against measured solo times, bounded, readable
    finally:
        kill_groups(state.dir)
