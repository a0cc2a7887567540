"""Helpers for the live-scheduler tests: a `colocate serve` subprocess, job submission, polling waits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from colocate.cli import app

REPO = Path(__file__).resolve().parents[1]


def write_cluster(path: Path, types: dict[str, int]) -> Path:
    """A cluster YAML with one node per type and ``types[name]`` GPUs on it."""
    path.write_text(yaml.safe_dump({"gpu_types": {
        name: {"nodes": 1, "gpus_per_node": gpus, "memory_gb": 16} for name, gpus in types.items()}}))
    return path


def submit(state: Path, directory: Path, **fields: Any) -> str:
    """Write a job file and submit it through the CLI; returns the printed name."""
    path = directory / f"{fields['name']}.yaml"
    path.write_text(yaml.safe_dump(fields))
    result = CliRunner().invoke(app, ["submit", "--state", str(state), str(path)])
    assert result.exit_code == 0, result.output
    return result.output.strip()


def jobs_json(state: Path) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["jobs", "--state", str(state), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def by_name(state: Path) -> dict[str, dict[str, Any]]:
    return {j["name"]: j for j in jobs_json(state)["jobs"]}


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 1.0) -> None:
    """Poll ``predicate`` (no fixed sleeps): fails with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    assert predicate(), f"timed out after {timeout_s:.0f} s waiting for {what}"


class ServeProcess:
    """``python -m colocate.cli serve ...`` in its own process (so it can be killed with SIGKILL)."""

    def __init__(self, state: Path, cluster: Path, *extra: str, log: Path) -> None:
        self.argv = [sys.executable, "-m", "colocate.cli", "serve", "--cluster", str(cluster), "--state", str(state),
                     "--round-s", "2", "--device", "cpu", "--grace", "20", *extra]
        self.log = log
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> "ServeProcess":
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        return self

    def kill9(self) -> None:
        assert self.popen is not None
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait()

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def kill_groups(state: Path, wait_s: float = 15.0) -> None:
    """Kill every group supervisor a test left behind (their jobs die with them). A group started in the test's
    last round may not have written its pid file yet: wait for it, or its supervisor and jobs outlive the test."""
    from scheduler.executor.supervise import process_alive, read_json

    deadline = time.monotonic() + wait_s
    groups = list((state / "runs").glob("g*.json"))
    while any(not g.with_suffix(".pid").exists() for g in groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid_file in (state / "runs").glob("*.pid"):
        recorded = read_json(pid_file)
        if recorded and process_alive(recorded["pid"], recorded["start_time"]):
            os.kill(recorded["pid"], signal.SIGKILL)


def events(state: Path, job: str | None = None) -> list[dict[str, Any]]:
    from scheduler.service.state.store import StateStore

    return StateStore(state, create=False).events(job)


def drive_rounds(server: Any, done: Callable[[], bool], timeout_s: float = 240.0) -> int:
    """Rounds as ``serve`` runs them (round_s after the end of enacting, background work in between) until
    ``done()``; the number of rounds."""
    rounds, deadline = 0, time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"not done after {rounds} rounds"
        server.round()
        rounds += 1
        ended = time.monotonic()
        while time.monotonic() - ended < server.config.round_s:
            server.between_rounds()
            time.sleep(0.05)
    return rounds
