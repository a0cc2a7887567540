"""Live goodput in serve: the gradient statistics jobs report are stored per job (the ``gradients`` table, added to
an existing database by a writer), smoothed once per report, set aside when damaged, and shown by ``jobs --json``
and ``learned``. The live test (slow) runs serve on the local backend with two jobs of known noise scales."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from colocate.cli import app
from scheduler.service import settle
from scheduler.service.front.client import check_state
from scheduler.service.jobs.jobspec import job_from_dict
from scheduler.service.state.store import StateStore

REPO = Path(__file__).resolve().parents[1]
JOB = {"name": "a", "command": "true", "application": "mine", "samples": 10_000, "batch_size": 32,
       "min_batch_size": 16, "max_batch_size": 512, "adaptive": True}


def _store(tmp_path: Path) -> StateStore:
    state = StateStore(tmp_path / "state")
    state.submit(job_from_dict(JOB))
    return state


def _fold(state: StateStore, progress: dict) -> None:
    row = state.job("a")
    assert row is not None
    with state.transaction() as db:
        settle.fold_progress(db, row, {"step": 0, "samples": 0, "restored_step": 0, "elapsed_s": 0.0, **progress},
                             {"a": row})


def test_reports_are_stored_smoothed_once_each(tmp_path: Path) -> None:
    state = _store(tmp_path)
    _fold(state, {"step": 5})  # no statistics yet: nothing stored
    assert state.gradients() == {}
    _fold(state, {"step": 10, "grad_sqr": 2.0, "grad_var": 20.0, "lr": 0.1})
    _fold(state, {"step": 10, "grad_sqr": 9.0, "grad_var": 9.0, "lr": 0.1})  # the same report polled again
    _fold(state, {"step": 20, "grad_sqr": 4.0, "grad_var": 40.0, "lr": 0.2})
    row = state.gradients()["a"]
    assert (row["grad_sqr"], row["grad_var"], row["lr"], row["reports"], row["step"]) == (3.0, 30.0, 0.2, 2, 20)


def test_jobs_json_and_learned_show_the_measured_statistics(tmp_path: Path) -> None:
    state = _store(tmp_path)
    with state.transaction() as db:
        db.update_job("a", batch_size=128)
    _fold(state, {"step": 10, "grad_sqr": 2.0, "grad_var": 128.0, "lr": 0.05})
    runner = CliRunner()
    out = runner.invoke(app, ["jobs", "--state", str(state.dir), "--json"])
    assert out.exit_code == 0, out.output
    view = json.loads(out.output)
    job = view["jobs"][0]
    # B_noise = 128 / 2 = 64; M0 = 32 (the job file's batch); at M = 128: (64 + 32) / (64 + 128) = 0.5
    assert (job["grad_sqr"], job["grad_var"], job["noise_scale"], job["lr"], job["efficiency"]) == (
        2.0, 128.0, 64.0, 0.05, 0.5)
    assert view["learned"]["gradients"][0]["noise_scale"] == 64.0
    shown = runner.invoke(app, ["learned", "--state", str(state.dir)])
    assert shown.exit_code == 0 and "noise scale" in shown.output and "0.5" in shown.output


def test_a_database_written_before_the_table_is_migrated_by_a_writer(tmp_path: Path) -> None:
    state = _store(tmp_path)
    path = state.path
    state.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE gradients")  # what a state directory of the previous version holds
    conn.commit()
    conn.close()
    reader = StateStore(tmp_path / "state", create=False, readonly=True)
    assert reader.gradients() == {} and reader.jobs()[0].name == "a"  # read-only: reads as none, changes nothing
    assert check_state(tmp_path / "state")["set_aside"] == []
    reader.close()
    writer = StateStore(tmp_path / "state")
    _fold(writer, {"step": 3, "grad_sqr": 1.0, "grad_var": 5.0})
    assert writer.gradients()["a"]["grad_var"] == 5.0


def test_a_gradients_table_of_another_layout_is_refused_at_start_up(tmp_path: Path) -> None:
    from common.errors import InputError

    state = _store(tmp_path)
    path = state.path
    state.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE gradients")
    conn.execute("CREATE TABLE gradients (job TEXT PRIMARY KEY, noise REAL)")
    conn.commit()
    conn.close()
    with pytest.raises(InputError, match="table 'gradients' lacks column 'grad_sqr'"):
        StateStore(tmp_path / "state")


def test_a_damaged_gradients_row_is_set_aside_and_starts_over(tmp_path: Path) -> None:
    state = _store(tmp_path)
    _fold(state, {"step": 3, "grad_sqr": 1.0, "grad_var": 5.0})
    with state.transaction() as db:
        db.execute("UPDATE gradients SET grad_var = -1 WHERE job = 'a'")
    assert state.gradients() == {}
    assert any(t == "gradients" and "grad_var" in p for (t, _), p in state.set_aside.items())
    _fold(state, {"step": 4, "grad_sqr": 1.0, "grad_var": 7.0})  # the next report starts the statistics over
    assert state.gradients()["a"]["grad_var"] == 7.0 and state.gradients()["a"]["reports"] == 1


@pytest.mark.parametrize("scaling", ["linear", None])
def test_a_job_files_lr_scaling_reaches_the_jobs_environment(tmp_path: Path, scaling: str | None) -> None:
    """The group document serve runs gives the job COLOCATE_LR_SCALING from its job file (none when the file names
    none: the job library's default), and the job library reads it back as named."""
    from scheduler.jobkit import read_env
    from scheduler.service.config import ServeConfig
    from scheduler.service.groups import build_group, group_document
    from scheduler.service.rounds import Slot

    state = StateStore(tmp_path / "state")
    state.submit(job_from_dict({**JOB, **({"lr_scaling": scaling} if scaling else {})}))
    row = state.job("a")
    assert row is not None and row.spec.lr_scaling == scaling  # stored and read back with the spec
    group = build_group((Slot("a", "t4", 1, 64, (), (0,), (0,)),), {"a": row}, ServeConfig(device="cpu"))
    doc = group_document("g00001", group, {"a": row}, ServeConfig(device="cpu"), state.dir)
    env = dict(doc.jobs[0].env)
    assert env.get("COLOCATE_LR_SCALING") == scaling
    assert read_env(env).lr_scaling == scaling and read_env(env).batch_size == 64


def test_a_round_starts_a_job_without_statistics_at_its_job_files_batch(tmp_path: Path) -> None:
    """Pollux's M0: a round starts an adaptive job that has not reported gradient statistics at its job file's
    batch (32), though throughput alone (the prior: larger is faster) would pick 1024; the same job with statistics
    (from an earlier run; all noise here, so every batch is as efficient) starts at its goodput batch, 1024."""
    from scheduler.executor.base import GroupPoll
    from scheduler.executor.local import LocalExecutor
    from scheduler.model.cluster import cluster_from_dict
    from scheduler.service.config import ServeConfig
    from scheduler.service.server import Server

    class Recording(LocalExecutor):  # starts nothing: the round's decision is what is tested
        batches: dict[str, str] = {}

        def start(self, group, doc):  # type: ignore[no-untyped-def]
            self.batches.update({j.name: j.env["COLOCATE_BATCH_SIZE"] for j in doc.jobs})
            return {}

        def poll(self, handle, doc):  # type: ignore[no-untyped-def]
            return GroupPoll(alive=True)

        def stop(self, handle, doc):  # type: ignore[no-untyped-def]
            pass

        def release(self, handle, doc):  # type: ignore[no-untyped-def]
            pass

    state = StateStore(tmp_path / "state")
    for name in ("fresh", "known"):
        state.submit(job_from_dict({**JOB, "name": name, "application": name, "max_gpus": 1, "max_batch_size": 1024}))
    row = state.job("known")
    assert row is not None
    with state.transaction() as db:
        settle.fold_progress(db, row, {"step": 10, "samples": 320, "restored_step": 0, "elapsed_s": 1.0,
                                       "grad_sqr": 0.0, "grad_var": 5.0}, {"known": row})
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}}})
    executor = Recording()
    server = Server(state, cluster, executor, ServeConfig(round_s=0.5, device="cpu"))
    server.round()
    assert executor.batches == {"fresh": "32", "known": "1024"}
    assert {r.name: r.batch_size for r in state.jobs()} == {"fresh": 32, "known": 1024}


def test_the_noise_job_follows_the_contract_and_reports_its_noise_scale(tmp_path: Path) -> None:
    """scripts/noise_job.py (the benchmark's job): its progress passes check_progress with the contract's fields."""
    import os
    import subprocess

    from scheduler.executor.job_files import read_progress

    progress = tmp_path / "progress.json"
    env = {**os.environ, "COLOCATE_CHECKPOINT": str(tmp_path / "ckpt"), "COLOCATE_PROGRESS_FILE": str(progress),
           "COLOCATE_TARGET_SAMPLES": "500", "COLOCATE_BATCH_SIZE": "64", "COLOCATE_TARGET_STEPS": ""}
    subprocess.run([sys.executable, str(REPO / "scripts" / "noise_job.py"), "--noise", "64", "--base-batch", "32",
                    "--step-s", "0.001", "--per-sample-s", "0"], env=env, check=True, timeout=60)
    record = read_progress(progress)
    assert record is not None and record["state"] == "finished" and record["samples"] >= 500
    assert record["grad_var"] / record["grad_sqr"] == pytest.approx(64.0)
    assert record["lr"] == pytest.approx(0.1 * 64 / 32)


@pytest.mark.slow
def test_serve_gives_a_small_noise_scale_a_small_batch_and_a_large_one_a_large_batch(tmp_path: Path) -> None:
    """Live, local backend: two adaptive jobs alike but for their reported noise scale (8 and 8192) start at their
    job file's batch (32: no statistics yet); once they report, serve moves the high-noise one to a large batch
    (throughput wins: its efficiency at 512 is 0.95) and keeps the low-noise one small (goodput)."""
    from dataclasses import replace

    from scheduler.executor.registry import make_executor
    from scheduler.model.cluster import cluster_from_dict
    from scheduler.service.config import LIVE_ILP, ServeConfig
    from scheduler.service.server import Server
    from tests.serve_helpers import kill_groups, wait_until

    state = StateStore(tmp_path / "state")
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}}})
    config = ServeConfig(round_s=0.5, device="cpu", stop_grace_s=10, ilp=replace(LIVE_ILP, restart_cost_s=1.0))
    server = Server(state, cluster, make_executor("local"), config)
    server.acquire()
    job = REPO / "scripts" / "noise_job.py"
    for b in (8, 8192):
        state.submit(job_from_dict({
            "name": f"n{b}", "command": f"exec {sys.executable} {job} --noise {b} --base-batch 32",
            "application": f"noise{b}", "samples": 10**9, "batch_size": 32, "min_batch_size": 16,
            "max_batch_size": 1024, "adaptive": True, "max_gpus": 1}))

    def settled() -> bool:
        server.round()
        rows = {r.name: r for r in state.jobs()}
        return (set(state.gradients()) == {"n8", "n8192"} and rows["n8"].state == "running"
                and (rows["n8"].batch_size or 0) <= 64 and rows["n8192"].state == "running"
                and (rows["n8192"].batch_size or 0) >= 512)

    try:
        wait_until(settled, 240, "the high-noise job to run at a large batch, the low-noise one at a small one")
        for name in ("n8", "n8192"):
            first = next(e for e in state.events(name) if e["kind"] == "started")
            assert ", batch 32, " in first["detail"], first  # M0 until the first report
        assert any(e["kind"] == "resized" for e in state.events("n8192"))  # then resized
        view = {j["name"]: j for j in json.loads(CliRunner().invoke(app, ["jobs", "--state", str(state.dir),
                                                                           "--json"]).output)["jobs"]}
        assert view["n8"]["noise_scale"] == 8.0 and view["n8192"]["noise_scale"] == 8192.0
    finally:
        kill_groups(state.dir)
