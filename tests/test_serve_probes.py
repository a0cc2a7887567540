"""Automatic probes of ``colocate serve``: what is probed (pure planning), and on the local backend with logical
GPUs on CPU — a never-measured zoo job type is profiled on a spare GPU by the profiler's runner and its solo and
pair appear in ``colocate learned`` as probes; no probe without a spare GPU; a failing probe is recorded once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from colocate.cli import app
from scheduler.executor.registry import make_executor
from scheduler.model.cluster import cluster_from_dict
from scheduler.model.colocation import ColocationTable
from scheduler.service.config import ServeConfig
from scheduler.service.jobs.jobspec import job_from_dict
from scheduler.service.probes.manager import DONE, FAILED, ProbeConfig, plan_targets, probing_enabled
from scheduler.service.server import Server
from scheduler.service.state.store import StateStore
from tests.serve_helpers import kill_groups, wait_until

TABLE = ColocationTable.from_rows([("t4", "tiny_cnn", "tiny_cnn", 0.7, 0.7), ("t4", "tiny_cnn", "resnet18", 0.5, 0.4)])
SHORT = ProbeConfig(enabled=True, warmup_iters=2, min_window_iters=3, min_window_s=0.5, timeout_s=120.0)
JOB = {"model": "tiny_cnn", "steps": 100_000, "batch_size": 16}


def _rows(tmp_path: Path, *jobs: dict[str, Any]) -> list[Any]:
    state = StateStore(tmp_path / "plan")
    for job in jobs:
        state.submit(job_from_dict(job))
    return state.jobs()


def _solo(app: str, batch: int, gpu: str = "t4", partner: str = "") -> dict[str, Any]:
    return {"application": app, "gpu_type": gpu, "num_gpus": 1, "batch_size": batch, "partner_type": partner,
            "iter_time_s": 0.01, "count": 3}


def test_a_never_measured_model_is_planned_with_the_partner_the_table_rates_best(tmp_path: Path) -> None:
    rows = _rows(tmp_path, {"name": "a", **JOB}, {"name": "r", "model": "resnet18", "steps": 10, "batch_size": 8},
                 {"name": "u", "command": "sleep 1", "application": "mine", "steps": 10, "batch_size": 4})
    targets = plan_targets(rows, [], [], ["t4"], TABLE, SHORT)
    by_app = {t.app: t for t in targets}
    assert set(by_app) == {"tiny_cnn", "resnet18"}  # the command-only job cannot be probed
    assert by_app["tiny_cnn"].partner == ("tiny_cnn", "tiny_cnn", 16)  # 0.7 + 0.7 beats 0.5 + 0.4
    assert by_app["resnet18"].partner is None  # 0.9 < 1: no pair the prior says pays
    # solo measured: only the missing pair is probed; pair measured too: nothing
    measured = [_solo("tiny_cnn", 16), _solo("resnet18", 8)]
    assert [(t.app, t.partner) for t in plan_targets(rows, measured, [], ["t4"], TABLE, SHORT)] == [
        ("tiny_cnn", ("tiny_cnn", "tiny_cnn", 16))]
    measured.append(_solo("tiny_cnn", 16, partner="tiny_cnn@16"))
    assert plan_targets(rows, measured, [], ["t4"], TABLE, SHORT) == []
    assert plan_targets(rows, [], [], [], TABLE, SHORT) == []  # no idle GPU: nothing


def test_a_failed_type_and_a_type_not_allowed_there_are_not_planned(tmp_path: Path) -> None:
    rows = _rows(tmp_path, {"name": "a", **JOB, "gpu_types": ["t4"]}, {"name": "b", **JOB, "batch_size": 8,
                                                                      "gpu_types": ["a100"]})
    failed = [{"gpu_type": "t4", "type": "tiny_cnn@16", "partner_type": "tiny_cnn@16", "state": FAILED}]
    assert plan_targets(rows, [], failed, ["t4"], TABLE, SHORT) == []
    assert [(t.gpu_type, t.batch) for t in plan_targets(rows, [], [], ["a100"], None, SHORT)] == [("a100", 8)]
    twice = _rows(tmp_path / "twice", {"name": "a", **JOB}, {"name": "b", **JOB})
    assert len(plan_targets(twice, [], [], ["t4"], TABLE, SHORT)) == 1  # two jobs of one type: one probe


def test_probes_are_off_by_default_on_cpu_and_follow_the_flag() -> None:
    assert not probing_enabled(ProbeConfig(), "cpu")
    assert probing_enabled(ProbeConfig(enabled=True), "cpu")
    assert not probing_enabled(ProbeConfig(enabled=False), "cuda")


def test_learned_marks_what_probes_measured_and_reads_damaged_records_as_none(tmp_path: Path) -> None:
    import json

    from scheduler.service.front.views import learned_view

    state = StateStore(tmp_path / "state")
    wrote: list[list[Any]] = [["tiny_cnn", "t4", 1, 16, ""], ["tiny_cnn", "t4", 1, 16, "tiny_cnn@16"],
                              ["tiny_cnn", "t4", 1, 16, "tiny_cnn@16"]]
    record = {"key": "p0001", "gpu_type": "t4", "type": "tiny_cnn@16", "partner_type": "tiny_cnn@16",
              "state": DONE, "started_at": 1.0, "gpu_s": 12.5, "error": "", "wrote": wrote}
    with state.transaction() as db:
        for key, t in zip(wrote, (0.010, 0.018, 0.018)):
            db.add_measurement(key[0], key[1], key[2], key[3], key[4], t)
        db.add_measurement("resnet18", "t4", 1, 8, "", 0.05)  # measured by a run
        db.set_meta("probes", json.dumps([record, {"key": 3}]))  # a damaged entry is left out
    view = learned_view(state)
    assert {m["application"]: m["source"] for m in view["throughput"]} == {"tiny_cnn": "probe", "resnet18": "run"}
    assert [(r["source"], round(r["ratio_a"], 3)) for r in view["colocation"]] == [("probe", round(0.010 / 0.018, 3))]
    assert [p["key"] for p in view["probes"]] == ["p0001"] and "wrote" not in view["probes"][0]
    with state.transaction() as db:
        db.add_measurement("tiny_cnn", "t4", 1, 16, "", 0.011)  # a later run of the job
        db.set_meta("probes", json.dumps([record]))
    assert {m["application"]: m["source"] for m in learned_view(state)["throughput"]}["tiny_cnn"] == "probe+run"
    result = CliRunner().invoke(app, ["learned", "--state", str(state.dir)])
    assert result.exit_code == 0 and "probe+run" in result.output and "p0001" in result.output, result.output
    with state.transaction() as db:
        db.set_meta("probes", "{not json")
    assert learned_view(state)["probes"] == []
    assert CliRunner().invoke(app, ["learned", "--state", str(state.dir)]).exit_code == 0


def _server(tmp_path: Path, gpus: int, probe: ProbeConfig = SHORT) -> tuple[StateStore, Server]:
    state = StateStore(tmp_path / "state")
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": gpus, "memory_gb": 16}}})
    config = ServeConfig(round_s=0.5, policy="fifo", device="cpu", stop_grace_s=5, probe=probe)
    server = Server(state, cluster, make_executor("local"), config, colocation=TABLE)
    server.acquire()
    return state, server


def _cleanup(state: StateStore, server: Server | None = None) -> None:
    """Kill every group and probe a test left behind, by the handles the server stored (a group started a moment
    ago may not have written its pid file yet, so ``kill_groups`` alone can miss it)."""
    executor = server.executor if server is not None else make_executor("local")
    if server is not None and server.probes is not None:
        server.probes.shutdown()
    for group in state.groups().values():
        executor.release(group.handle, group.doc)
    kill_groups(state.dir, wait_s=0)  # released by their handles: none of them writes a pid file any more


def _probes(state: StateStore) -> list[dict[str, Any]]:
    import json

    return json.loads(state.meta("probes") or "[]")


@pytest.mark.slow
def test_a_never_measured_model_is_probed_on_a_spare_gpu_and_its_solo_and_pair_are_learned(tmp_path: Path) -> None:
    state, server = _server(tmp_path, gpus=2)
    try:
        state.submit(job_from_dict({"name": "a", **JOB}))
        server.round()
        probe = _probes(state)[0]
        job = state.job("a")
        assert probe["state"] == "running" and (probe["node"], probe["gpu"]) != (job.nodes[0], job.gpus[0])
        held = ("t4", probe["node"], probe["gpu"])
        assert server.probes is not None and server.probes.busy() == {held}
        state.submit(job_from_dict({"name": "b", "command": "sleep 120", "application": "mine", "steps": 10,
                                    "batch_size": 4}))  # the policy places it on the probe's GPU: it waits

        def ended() -> bool:
            server.round()
            running = _probes(state)[0]["state"] == "running"
            b = state.job("b")
            assert not (running and b.state == "running"), "b was started on a GPU a probe holds"
            return not running

        wait_until(ended, 300, "the probe to end")
        def b_runs() -> bool:
            server.round()
            return state.job("b").state == "running"

        wait_until(b_runs, 60, "b to start once the probe ended")
        assert ("t4", state.job("b").nodes[0], state.job("b").gpus[0]) == held
        probe = _probes(state)[0]
        assert probe["state"] == DONE, probe["error"]
        assert probe["partner_type"] == "tiny_cnn@16" and probe["gpu_s"] > 0 and len(_probes(state)) == 1
        solo = [m for m in state.measurements() if m["partner_type"] == "" and m["num_gpus"] == 1]
        assert solo and solo[0]["application"] == "tiny_cnn" and solo[0]["iter_time_s"] > 0
        result = CliRunner().invoke(app, ["learned", "--state", str(state.dir)])
        assert result.exit_code == 0, result.output
        assert "probe" in result.output and "tiny_cnn@16" in result.output and "done" in result.output
        from scheduler.service.front.views import learned_view

        pairs = learned_view(state)["colocation"]
        assert [(p["type_a"], p["type_b"], p["solo_source"]) for p in pairs] == [
            ("tiny_cnn@16", "tiny_cnn@16", "measured")]
        assert pairs[0]["source"] in ("probe", "probe+run") and pairs[0]["ratio_a"] > 0
    finally:
        _cleanup(state, server)


@pytest.mark.slow
def test_no_probe_runs_when_no_gpu_is_spare(tmp_path: Path) -> None:
    state, server = _server(tmp_path, gpus=1)
    try:
        state.submit(job_from_dict({"name": "a", **JOB}))
        for _ in range(3):
            server.round()
        assert server.probes is not None and state.job("a").state == "running" and _probes(state) == []
    finally:
        _cleanup(state, server)


@pytest.mark.slow
def test_probes_stop_with_the_server(tmp_path: Path) -> None:
    import pandas as pd

    from scheduler.executor.supervise import process_alive
    from scheduler.formats.colocation_table import write_colocation_table
    from scheduler.service.serve import ServeRequest, serve_forever

    cluster, table = tmp_path / "cluster.yaml", tmp_path / "table.csv"
    cluster.write_text("gpu_types:\n  t4: {nodes: 1, gpus_per_node: 2, memory_gb: 16}\n")
    write_colocation_table(pd.DataFrame([{"gpu_type": "t4", "type_a": "tiny_cnn", "type_b": "tiny_cnn",
                                          "ratio_a": 0.7, "ratio_b": 0.7}]), table)
    state = StateStore(tmp_path / "state")
    state.submit(job_from_dict({"name": "a", **JOB}))
    handles: list[dict[str, Any]] = []

    def a_probe_started() -> bool:  # the server is stopped as soon as its first probe runs
        handles.extend(p["handle"] for p in _probes(state) if "handle" in p)
        return bool(handles)

    try:
        config = ServeConfig(policy="fifo", round_s=0.5, device="cpu", probe=ProbeConfig(enabled=True))
        request = ServeRequest(cluster=cluster, state=state.dir, backend="local", colocation=table, max_rounds=20,
                               config=config)
        serve_forever(request, should_stop=a_probe_started)
        kinds = [e["kind"] for e in state.events() if e["kind"].startswith("probe")]
        assert kinds == ["probe-started", "probe-interrupted"] and [p["state"] for p in _probes(state)] == ["interrupted"]
        wait_until(lambda: not process_alive(handles[0]["pid"], handles[0]["start_time"]), 30, "the probe killed")
    finally:
        _cleanup(state)


@pytest.mark.slow
def test_a_failing_probe_is_recorded_once_and_not_retried(tmp_path: Path) -> None:
    # a run timeout no worker can meet: the profiler's runner fails the run, the probe exits with the failure
    state, server = _server(tmp_path, gpus=2, probe=ProbeConfig(enabled=True, warmup_iters=2, min_window_iters=3,
                                                                 min_window_s=0.5, timeout_s=0.01))
    try:
        state.submit(job_from_dict({"name": "a", **JOB}))

        def ended() -> bool:
            server.round()
            return bool(_probes(state)) and _probes(state)[0]["state"] != "running"

        wait_until(ended, 300, "the probe to fail")
        for _ in range(3):
            server.round()
        probes = _probes(state)
        assert len(probes) == 1 and probes[0]["state"] == FAILED and "timed out" in probes[0]["error"]
        kinds = [e["kind"] for e in state.events() if e["kind"].startswith("probe")]
        assert kinds == ["probe-started", "probe-failed"]
        assert not [m for m in state.measurements() if m["num_gpus"] == 1 and m["partner_type"]]
    finally:
        _cleanup(state, server)


@pytest.mark.slow
def test_a_probe_a_killed_server_left_behind_is_killed_by_the_next_one(tmp_path: Path) -> None:
    from scheduler.executor.supervise import process_alive

    state, server = _server(tmp_path, gpus=2)
    try:
        state.submit(job_from_dict({"name": "a", **JOB}))
        server.round()
        handle = _probes(state)[0]["handle"]
        server._lock.close()  # what kill -9 of the server leaves: its lock released, its probe still running
        _, second = _server(tmp_path, gpus=2)
        [probe] = _probes(state)
        assert probe["state"] == "interrupted" and "earlier server" in probe["error"] and probe["gpu_s"] > 0
        wait_until(lambda: not process_alive(handle["pid"], handle["start_time"]), 30, "the left-behind probe killed")
        assert second.probes is not None and not second.probes.running()
    finally:
        _cleanup(state, server)
