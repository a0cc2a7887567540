"""On Ray, killing a group's actor process must not run the job twice: the supervisor dies with its actor
(parent-death signal) and the trainer with its supervisor (the reaper of its process group), so when the
server starts the job again there is one trainer at a time, and the job completes once."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.serve_helpers import by_name, events, submit, wait_until
from tests.test_serve_ray import LONG, ray_address, served  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(1200)]


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _live_trainers(state: Path) -> int:
    from scheduler.executor.supervise import process_alive, read_json

    return sum(process_alive(int(pid), start) for p in (state / "runs").glob("*.pid")
               for pid, start in ((read_json(p) or {}).get("jobs") or {}).values())


def test_killing_the_actor_runs_the_job_once(served, tmp_path: Path) -> None:  # noqa: F811
    from scheduler.executor.supervise import read_json

    state, start = served
    server = start({"t4": 2})
    submit(state, tmp_path, name="a", model="tiny_cnn", steps=2500, batch_size=8, max_retries=3)
    wait_until(lambda: by_name(state)["a"]["step"] > 50 and _live_trainers(state) == 1, LONG,
               f"a training; log {server.output()}")
    supervisor = read_json(next((state / "runs").glob("*.pid")))
    os.kill(_parent(supervisor["pid"]), signal.SIGKILL)  # the actor's worker process
    most = [1]

    def done() -> bool:
        most[0] = max(most[0], _live_trainers(state))
        return by_name(state)["a"]["state"] == "completed"

    wait_until(done, LONG, f"a to complete after its actor died; log {server.output()}", interval_s=0.2)
    job = by_name(state)["a"]
    assert job["step"] == 2500 and job["crashes"] == 1
    assert [e["kind"] for e in events(state, "a")].count("completed") == 1
    assert most[0] <= 1  # never two trainers of the job at once
