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
from click.testing import CliRunner

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
    last round may not have written its pid file yet: wait for it, or its supervisor and jobs outlive the test.
    Only groups the state still lists are waited for: one that ended (dropped from the state) never writes one."""
    from scheduler.executor.supervise import process_alive, read_json

    deadline = time.monotonic() + wait_s
    live = _live_groups(state)
    groups = [g for g in (state / "runs").glob("g*.json") if live is None or g.stem in live]
    while any(not g.with_suffix(".pid").exists() for g in groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid_file in (state / "runs").glob("*.pid"):
        recorded = read_json(pid_file)
        if recorded and process_alive(recorded["pid"], recorded["start_time"]):
            os.kill(recorded["pid"], signal.SIGKILL)


def _live_groups(state: Path) -> set[str] | None:
    """The groups the state lists; None when it cannot be read (a test that damaged it): then every group."""
    import sqlite3

    from common.errors import InputError
    from scheduler.service.state.store import StateStore

    try:
        return set(StateStore(state, readonly=True).groups())
    except (InputError, OSError, sqlite3.Error):
        return None


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


def documented_metrics() -> set[str]:
    """Every series docs/serve-live.md's metrics table lists (names as Prometheus shows them)."""
    import re

    text = (REPO / "docs" / "serve-live.md").read_text().split("## Metrics", 1)[1].split("Example queries", 1)[0]
    return set(re.findall(r"`(colocate_[a-z_]+)", text))


def scrape(port: int) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    """The metrics endpoint's samples: name -> labels -> value (``_created`` samples left out)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, dict[frozenset[tuple[str, str]], float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.endswith("_created"):  # the client's creation times of counters and histograms
            continue
        out.setdefault(family.name + ("_total" if family.type == "counter" else ""), {})  # even with no series yet
        for s in family.samples:
            if not s.name.endswith("_created"):
                out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


def expected_metrics(view: dict[str, Any], gpus: dict[str, int]) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    """What every series must read, derived from ``colocate jobs --json`` (``view``) and the cluster's GPUs per
    type (``gpus``): the metrics and the front door must tell one story."""
    jobs = view["jobs"]
    running = [j for j in jobs if j["state"] == "running"]

    def one(**labels: str) -> frozenset[tuple[str, str]]:
        return frozenset(labels.items())

    states = ("queued", "running", "completed", "failed", "cancelled")
    out: dict[str, dict[frozenset[tuple[str, str]], float]] = {
        "colocate_jobs": {one(state=s): sum(j["state"] == s for j in jobs) for s in states},
        "colocate_gpus": {one(gpu_type=t): n for t, n in gpus.items()},
        "colocate_rounds_total": {one(): view["rounds"]},
        "colocate_round_seconds_count": {one(): view["rounds"]},
        "colocate_restarts_total": {one(): sum(j["restarts"] for j in jobs)},
        "colocate_round_failures_total": {one(): view["round_failures"]["total"]},
        "colocate_learned_pairs": {one(): sum(p.get("solo_source") == "measured"
                                              for p in view["learned"]["colocation"])},
    }
    if not any(j["ooms"] for j in jobs):
        out["colocate_ooms_total"] = {}  # no job ran out of memory: no failure counted
    waiting: dict[frozenset[tuple[str, str]], float] = {}
    for j in jobs:
        if j["state"] == "queued" and j["waiting"]:
            key = one(reason=j["waiting"]["code"])
            waiting[key] = waiting.get(key, 0) + 1
    out["colocate_waiting_jobs"] = waiting
    groups = {frozenset([j["name"], *(j["partner"] or "").split(",")]) - {""}: j for j in running}
    used = {t: sum(g["num_gpus"] for g in groups.values() if g["gpu_type"] == t) for t in gpus}
    packed = {t: sum(g["num_gpus"] for k, g in groups.items() if g["gpu_type"] == t and len(k) > 1) for t in gpus}
    out["colocate_gpus_used"] = {one(gpu_type=t): n for t, n in used.items()}
    out["colocate_gpus_packed"] = {one(gpu_type=t): n for t, n in packed.items()}
    for name, field, scale in (("colocate_job_samples_per_second", "samples_per_s", 1.0),
                               ("colocate_job_slowdown", "slowdown", 1.0),
                               ("colocate_job_memory_limit_bytes", "memory_limit_gib", 2.0**30)):
        out[name] = {one(job_name=j["name"], gpu_type=j["gpu_type"], partners=",".join(sorted(
            (j["partner"] or "").split(",")) if j["partner"] else "")): j[field] * scale
                     for j in running if j[field] is not None}
    return out


def assert_metrics_match(scraped: dict[str, dict[frozenset[tuple[str, str]], float]], view: dict[str, Any],
                         gpus: dict[str, int]) -> None:
    """Every documented series is exported, nothing undocumented is, and each reads what ``jobs --json`` says."""
    import math

    documented = documented_metrics()
    families = {n for n in scraped if not n.endswith(("_bucket", "_sum", "_count"))}
    assert families == documented, (families ^ documented)
    for name, series in expected_metrics(view, gpus).items():
        got = scraped.get(name, {})
        rounded = name in ("colocate_job_samples_per_second", "colocate_job_slowdown",
                           "colocate_job_memory_limit_bytes")  # jobs --json rounds these
        for labels, value in series.items():
            assert labels in got, (name, dict(labels), got)
            assert math.isclose(got[labels], value, rel_tol=0.01 if rounded else 1e-9, abs_tol=0.006 if rounded else 0), \
                (name, dict(labels), got[labels], value)
        extra = {k: v for k, v in got.items() if k not in series and v != 0}
        assert not extra or name == "colocate_gpu_jobs", (name, extra)  # a reason no job waits for any more reads 0
    per_gpu = scraped["colocate_gpu_jobs"]
    assert len(per_gpu) == sum(gpus.values())
    running = [j for j in view["jobs"] if j["state"] == "running"]
    assert sum(per_gpu.values()) == sum(j["num_gpus"] for j in running)
    assert all(v >= 0 for s in scraped.values() for v in s.values())
