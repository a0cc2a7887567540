"""`colocate serve` end to end, for real: a two-node Ray cluster with logical GPUs of two types, real tiny_cnn
training processes, 2 s rounds, and `colocate submit/jobs/cancel/learned` from this (another) process.

One behaviour of the issue per test: staggered arrivals all complete (on nodes of their GPU type); a pair
is formed and its measured ratios appear in the learned table; an adaptive job is resized with its progress
kept; ``kill -9`` of the server, restart, every job completes exactly once (there, user commands that follow
the checkpoint contract: the server's death is the point, not training). Waits poll the state database
with generous bounds (the machine is small and shared), never fixed sleeps.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from colocate.cli import app
from scheduler.formats.colocation_table import load_colocation_table
from tests.serve_helpers import (
    ServeProcess,
    by_name,
    events,
    jobs_json,
    kill_groups,
    submit,
    wait_until,
    write_cluster,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(1200)]
TYPES = {"t4": "T4", "v100": "V100"}
LONG = 400.0  # seconds: bound of one wait on a loaded 2-core machine


@pytest.fixture(scope="module")
def ray_address():
    import ray
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "num_gpus": 2, "resources": {"accelerator_type:T4": 1}, "include_dashboard": False})
    nodes.add_node(num_cpus=1, num_gpus=2, resources={"accelerator_type:V100": 1})
    ray.init(address=nodes.address, log_to_driver=False)
    try:
        yield nodes.address
    finally:
        ray.shutdown()
        nodes.shutdown()


@pytest.fixture
def served(tmp_path: Path, ray_address: str):
    """Start servers on one state directory; everything they started is killed at the end."""
    state = tmp_path / "state"
    servers: list[ServeProcess] = []

    def start(cluster: dict[str, int], *extra: str) -> ServeProcess:
        path = write_cluster(tmp_path / "cluster.yaml", cluster)
        server = ServeProcess(state, path, "--backend", "ray", "--address", ray_address, *extra,
                              log=tmp_path / "serve.log").start()
        servers.append(server)
        return server

    yield state, start
    for server in servers:
        server.stop()
    kill_groups(state)
    import ray

    from scheduler.executor.ray.backend import NAMESPACE

    for actor in ray.util.list_named_actors(all_namespaces=True):  # detached: they outlive their server
        if actor["namespace"] == NAMESPACE:
            ray.kill(ray.get_actor(actor["name"], namespace=NAMESPACE))


def _node_types() -> dict[str, str]:
    import ray

    return {node["NodeID"]: key.split(":", 1)[1] for node in ray.nodes() for key in node["Resources"]
            if key.startswith("accelerator_type:")}


def _completed_once(state: Path, name: str) -> None:
    assert [e["kind"] for e in events(state, name)].count("completed") == 1


def test_jobs_submitted_at_different_times_all_complete_on_their_gpu_type(served, tmp_path: Path) -> None:
    state, start = served
    server = start({"t4": 2, "v100": 2})
    submit(state, tmp_path, name="a", model="tiny_cnn", steps=400, batch_size=8, gpu_types=["t4"])
    wait_until(lambda: by_name(state)["a"]["state"] == "running", LONG, "a to start")
    submit(state, tmp_path, name="b", model="tiny_cnn", steps=300, batch_size=8, gpu_types=["v100"])
    wait_until(lambda: by_name(state)["b"]["state"] != "queued", LONG, "b to start")
    submit(state, tmp_path, name="c", model="tiny_cnn", steps=300, batch_size=8, min_gpus=2, gpu_types=["v100"])
    wait_until(lambda: all(j["state"] == "completed" for j in by_name(state).values()), LONG,
               f"every job to complete; server log: {server.output()}")
    jobs = by_name(state)
    assert {n: j["step"] for n, j in jobs.items()} == {"a": 400, "b": 300, "c": 300}
    for name in jobs:
        _completed_once(state, name)
    node_types = _node_types()
    from scheduler.service.state.store import StateStore

    started = [e for e in StateStore(state).events() if e["kind"] == "started"]
    assert {e["job"]: e["detail"].split("×")[1].split()[0] for e in started} == {"a": "t4", "b": "v100", "c": "v100"}
    handles = [line for line in (state / "runs").glob("*.json")]
    assert len(handles) == 3
    for group_file in handles:  # the Ray actor of each group ran on a node of its GPU type
        from scheduler.executor.group_doc import GroupDoc

        doc = GroupDoc.read(group_file)
        gpu_type = doc.jobs[0].env["COLOCATE_GPU_TYPE"]
        assert doc.cuda_visible_devices is None  # --device cpu: logical GPUs only
        assert TYPES[gpu_type] in node_types.values()
    log = (state / "jobs" / "c" / "train.log").read_text()
    assert "quiet_torchrun" in log and "--nproc-per-node=2" in log  # torchrun: data-parallel over its 2 GPUs


def test_a_pair_is_formed_and_its_measured_ratios_are_learned(served, tmp_path: Path) -> None:
    state, start = served
    prior = tmp_path / "prior.csv"
    prior.write_text("gpu_type,type_a,type_b,ratio_a,ratio_b\nt4,tiny_cnn,tiny_cnn,0.95,0.95\n")
    server = start({"t4": 1}, "--colocation", str(prior))
    submit(state, tmp_path, name="a", model="tiny_cnn", steps=100000, batch_size=8)
    wait_until(lambda: any(m["count"] >= 2 for m in jobs_json(state)["learned"]["throughput"]), LONG,
               f"a solo measurement; server log: {server.output()}")
    submit(state, tmp_path, name="b", model="tiny_cnn", steps=100000, batch_size=8)
    wait_until(lambda: any(" with a, group " in e["detail"] for e in events(state, "b")),
               LONG, f"the pair a+b; server log: {server.output()}")
    def measured() -> list:  # a pair row is pending until both solo times are measured
        return [r for r in jobs_json(state)["learned"]["colocation"] if r["solo_source"] == "measured"]

    wait_until(lambda: bool(measured()), LONG, "measured ratios of the pair")
    row = measured()[0]
    assert (row["gpu_type"], row["type_a"], row["type_b"], row["solo_source"]) == ("t4", "tiny_cnn@8", "tiny_cnn@8",
                                                                                 "measured")
    assert 0 < row["ratio_a"] < 3 and 0 < row["ratio_b"] < 3 and (row["ratio_a"], row["ratio_b"]) != (0.95, 0.95)
    out = tmp_path / "learned.csv"
    result = CliRunner().invoke(app, ["learned", "--state", str(state), "--out", str(out)])
    assert result.exit_code == 0, result.output
    from scheduler.model.jobs import Job

    table = load_colocation_table(out)  # the format colocate schedule / simulate --colocation read
    job = Job("x", "tiny_cnn", batch_size=8)
    # The server keeps measuring while we read: compare with the exported rows, not the earlier snapshot.
    exported = pd.read_csv(out, comment="#")
    exported = exported[(exported.gpu_type == "t4") & (exported.type_a == "tiny_cnn@8")
                        & (exported.type_b == "tiny_cnn@8")]
    assert len(exported) == 1
    assert table.lookup("t4", job, job) == pytest.approx((exported.ratio_a.iloc[0], exported.ratio_b.iloc[0]))
    assert 0 < exported.ratio_a.iloc[0] < 3 and exported.ratio_a.iloc[0] != 0.95
    for name in ("a", "b"):
        assert CliRunner().invoke(app, ["cancel", "--state", str(state), name]).exit_code == 0
    wait_until(lambda: all(j["state"] == "cancelled" for j in by_name(state).values()), LONG, "both cancelled")


def test_an_adaptive_job_is_resized_and_keeps_its_progress(served, tmp_path: Path) -> None:
    state, start = served
    # no minimum run: on a loaded machine the measured start-ups (and so the hold) can outlast the whole job.
    # Restart cost 0.5 s: Sia's restart factor T / (T + S) must reach about 0.94 (the gain of 2 GPUs, 1.09×,
    # beats keeping the run, 1.02×) while the job still runs, so at T ≈ 8 s (step ~460 of batch 32 here, first
    # done): 2000 steps last ≈ 20 s alone (it may shrink back once its 2-GPU rate is measured: DDP on 2 CPU cores)
    server = start({"t4": 2}, "--restart-cost", "0.5", "--min-run", "0")
    submit(state, tmp_path, name="first", model="tiny_cnn", steps=600, batch_size=8)
    wait_until(lambda: by_name(state)["first"]["state"] == "running", LONG, "first to start")
    # batch fixed at 32: by the prior, 2 GPUs give this job 1.09× its 1-GPU goodput — worth a restart once a
    # GPU is free, not worth keeping the other job waiting (serve's fairness): it starts on 1 GPU and grows
    submit(state, tmp_path, name="ad", model="tiny_cnn", steps=2000, batch_size=32, max_gpus=2, adaptive=True)
    wait_until(lambda: any(e["kind"] == "resized" for e in events(state, "ad"))
               or by_name(state)["ad"]["state"] == "completed", LONG, f"ad to be resized; log {server.output()}")
    wait_until(lambda: by_name(state)["ad"]["state"] == "completed", LONG, f"ad to complete; log {server.output()}")
    kinds = [e for e in events(state, "ad")]
    resized = [e for e in kinds if e["kind"] == "resized"]
    assert resized, [(e["kind"], e["detail"]) for e in kinds]
    assert any(e["detail"].startswith("2×") for e in resized)  # it grew to both GPUs once first was done
    stopped = [int(re.search(r"step (\d+)", e["detail"]).group(1)) for e in kinds if e["kind"] == "stopped"]
    log = (state / "jobs" / "ad" / "train.log").read_text()
    restored = [int(s) for s in re.findall(r"restored step (\d+)", log)]
    assert stopped and restored[:len(stopped)] == stopped  # each restart resumed exactly where it stopped
    assert by_name(state)["ad"]["step"] == 2000 and by_name(state)["ad"]["restarts"] >= 1
    _completed_once(state, "ad")


def test_kill_9_of_the_server_loses_nothing_and_jobs_complete_once(served, tmp_path: Path) -> None:
    """The jobs are user commands that follow the checkpoint contract (a step is a 20 ms sleep): what is tested is
    the server's death and re-adoption, and jobs that do not compete for the CPU keep the loaded machine's other
    tests fast (real training on Ray: the tests above)."""
    from scheduler.executor.supervise import process_alive, read_json
    from tests.test_serve_local import CONTRACT

    STEPS = 1200  # noqa: N806

    state, start = served
    server = start({"t4": 2, "v100": 2})
    script = tmp_path / "train.py"
    script.write_text(CONTRACT)
    # long enough (about 25 s) that neither ends before the other starts: on a loaded CI machine one group's Ray
    # actor started 12 s after the other's
    for name, gpu in (("a", "t4"), ("b", "v100")):
        submit(state, tmp_path, name=name, command=f"{sys.executable} {script}", application="mine", steps=STEPS,
               batch_size=4, gpu_types=[gpu])
    wait_until(lambda: all(j["step"] > 0 for j in by_name(state).values()), LONG,
               f"both jobs running; log {server.output()}")
    assert all(j["state"] == "running" for j in by_name(state).values()), by_name(state)  # the premise
    server.kill9()
    supervisors = [read_json(p) for p in (state / "runs").glob("*.pid")]
    assert len(supervisors) == 2 and all(process_alive(s["pid"], s["start_time"]) for s in supervisors)
    from scheduler.executor.supervise import PROGRESS_FILE

    def step(name: str) -> int:
        return int((read_json(state / "jobs" / name / PROGRESS_FILE) or {}).get("step", 0))

    before = step("a")
    wait_until(lambda: step("a") > before, LONG, "a to keep running without the server")
    start({"t4": 2, "v100": 2})
    wait_until(lambda: all(j["state"] == "completed" for j in by_name(state).values()), LONG, "both to complete")
    jobs = by_name(state)
    for name in ("a", "b"):
        assert (jobs[name]["step"], jobs[name]["restarts"], jobs[name]["crashes"]) == (STEPS, 0, 0)
        _completed_once(state, name)
        log = (state / "jobs" / name / "train.log").read_text()
        assert log.count("resumed at step") == 1 and "resumed at step 0 " in log  # adopted, never started again
    assert any("2 group(s) to re-adopt" in e["detail"] for e in events(state) if e["kind"] == "server-started")
