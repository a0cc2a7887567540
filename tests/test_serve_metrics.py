"""The metrics endpoint of a live server (real processes, real rounds) exports every series docs/serve-live.md lists,
nothing else, and each reads what ``colocate jobs --json`` says: jobs by state and by why they wait, GPUs used and
packed, per-GPU and per-job series, rounds, restarts, learned pairs, failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.service.metrics import ServeMetrics
from tests.serve_helpers import assert_metrics_match, jobs_json, kill_groups, scrape
from tests.test_serve_contract import _drive, _job, _server
from tests.test_serve_health import _free_port

pytestmark = pytest.mark.slow


def test_every_documented_series_reads_what_jobs_json_says(tmp_path: Path) -> None:
    state, server = _server(tmp_path)
    metrics, port = ServeMetrics(), _free_port()
    metrics.serve(port)
    server.on_round_end, server.on_round_failed = metrics.update, metrics.round_failed
    try:
        state.submit(_job(tmp_path, "done", 8))
        _drive(server, lambda: (j := state.job("done")) is not None and j.state == "completed", 120)
        state.submit(_job(tmp_path, "a", 10**6, env="SHARED_SLOWDOWN=1.8"))
        _drive(server, lambda: any(not m["partner_type"] for m in state.measurements()), 120)
        for name in ("b", "c"):  # one of them shares a's GPU, the other waits (pairs only)
            state.submit(_job(tmp_path, name, 10**6, env="SHARED_SLOWDOWN=1.8"))

        def measured() -> bool:
            jobs = jobs_json(state.dir)["jobs"]
            queued = [j for j in jobs if j["state"] == "queued"]
            return (any(j["slowdown"] is not None for j in jobs if j["state"] == "running")
                    and len(queued) == 1 and queued[0]["waiting"] is not None)

        try:
            _drive(server, measured, 240)
        except AssertionError as late:
            raise AssertionError(f"{late}: {jobs_json(state.dir)['jobs']}") from None
        view = jobs_json(state.dir)  # no round between this and the scrape: one state
        assert {j["state"] for j in view["jobs"]} == {"completed", "running", "queued"}
        assert_metrics_match(scrape(port), view, {"t4": 1})
    finally:
        metrics.shutdown()
        kill_groups(state.dir)


def test_a_wrong_value_or_a_renamed_series_is_caught() -> None:
    view = {"jobs": [{"name": "a", "state": "running", "gpu_type": "t4", "num_gpus": 1, "partner": None,
                      "restarts": 0, "ooms": 0, "waiting": None, "samples_per_s": 10.0, "slowdown": None,
                      "memory_limit_gib": None}],
            "rounds": 1, "round_failures": {"total": 0}, "learned": {"colocation": []}}
    metrics = ServeMetrics()
    port = _free_port()
    metrics.serve(port)
    try:
        metrics.jobs.labels(state="running").set(1)
        for s in ("queued", "completed", "failed", "cancelled"):
            metrics.jobs.labels(state=s).set(0)
        metrics.gpus.labels(gpu_type="t4").set(1)
        metrics.gpus_used.labels(gpu_type="t4").set(1)
        metrics.gpus_packed.labels(gpu_type="t4").set(0)
        metrics.gpu_jobs.labels(gpu_type="t4", node="0", gpu="0").set(-7)  # the sabotage
        metrics.job_rate.labels("a", "t4", "").set(10.0)
        metrics.round_seconds.observe(0.1)
        metrics.rounds.inc()
        with pytest.raises(AssertionError):
            assert_metrics_match(scrape(port), view, {"t4": 1})
        metrics.gpu_jobs.labels(gpu_type="t4", node="0", gpu="0").set(1)
        assert_metrics_match(scrape(port), view, {"t4": 1})
        metrics.job_rate.labels("a", "t4", "").set(12.0)
        with pytest.raises(AssertionError):
            assert_metrics_match(scrape(port), view, {"t4": 1})
    finally:
        metrics.shutdown()
