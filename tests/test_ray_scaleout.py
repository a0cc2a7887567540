"""Ray scale-out, for real: a two-node Ray cluster with logical GPUs of two types on this CPU machine.

One cluster serves the whole module (Ray start-up is slow on 2 cores): a head node with two logical "H100"
GPUs and a worker node with two logical "A100" GPUs (``num_cpus=2, num_gpus=4`` in all), each node marked
with the ``accelerator_type:<NAME>`` resource Ray puts on real GPU nodes. Campaign runs and launched GPU
groups must land on a node of their type, and a Ray worker killed mid-campaign must not lose or duplicate
a run.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from colocate.cli import app
from common.errors import InputError
from profiler.campaign.cells import plan_runs
from profiler.campaign.spec import spec_from_dict
from profiler.results.store import ResultsStore

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TYPES = {"h100": "H100", "a100": "A100"}
CAMPAIGN = {
    "name": "ray-two-types", "models": ["tiny_cnn"], "batch_sizes": [4], "repetition": True,
    "group_sizes": [1, 2], "repeats": 2, "warmup_iters": 2, "min_window_iters": 4, "gpu_types": list(TYPES),
}


@pytest.fixture(scope="module")
def cluster():
    import ray
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "num_gpus": 2, "resources": {"accelerator_type:H100": 1}, "include_dashboard": False})
    nodes.add_node(num_cpus=1, num_gpus=2, resources={"accelerator_type:A100": 1})
    ray.init(address=nodes.address, log_to_driver=False)
    node_types = {}
    for node in ray.nodes():
        for key in node["Resources"]:
            if key.startswith("accelerator_type:"):
                node_types[node["NodeID"]] = key.split(":", 1)[1]
    try:
        yield node_types
    finally:
        ray.shutdown()
        nodes.shutdown()


def _ray_task_pids(prefix: str) -> dict[int, str]:
    """PIDs of Ray workers executing a task named ``prefix ...`` (Ray titles them ``ray::<task name>``)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if title.startswith(f"ray::{prefix} "):
            found[int(entry.name)] = title.removeprefix(f"ray::{prefix} ")
    return found


def test_campaign_over_two_gpu_types_survives_a_killed_worker(cluster, tmp_path: Path) -> None:
    from profiler.campaign.ray_backend import TASK_NAME_PREFIX, run_campaign_on_ray

    spec = spec_from_dict(CAMPAIGN)
    planned = {run.run_id: run for run in plan_runs(spec)}
    assert len(planned) == 8 and {run.cell.gpu_type for run in planned.values()} == set(TYPES)
    killed: dict[str, object] = {}
    campaign_over = threading.Event()

    def kill_a_group_run() -> None:  # SIGKILL the Ray worker of the first pair run we see executing
        # no fixed deadline: on a loaded machine the solo runs alone can take minutes
        while not campaign_over.is_set() and not killed:
            for pid, title in _ray_task_pids(TASK_NAME_PREFIX).items():
                if ":pair|" in title:
                    time.sleep(0.5)  # let it start its job processes
                    if _ray_task_pids(TASK_NAME_PREFIX).get(pid) != title:
                        break  # that run ended meanwhile: look again
                    os.kill(pid, signal.SIGKILL)
                    killed.update(pid=pid, run_id=title.strip())
                    return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_a_group_run, daemon=True)
    killer.start()
    events = []
    # task_retries=0: Ray reports the dead worker to the driver, whose own re-queueing must recover the run
    try:
        store = run_campaign_on_ray(spec, tmp_path, on_progress=events.append, task_retries=0)
    finally:
        campaign_over.set()
        killer.join(timeout=5)

    runs = store.runs()
    assert killed, "no pair run was seen executing"
    assert sorted(runs["run_id"]) == sorted(planned), "every run exactly once"
    assert (runs["status"] == "ok").all(), runs[["run_id", "status", "error"]]
    assert killed["run_id"] in set(runs["run_id"])
    pairs = runs[runs["kind"] == "pair"]
    assert pairs["delta"].notna().all() and (pairs["delta"] > 0).all()
    jobs = store.jobs()
    assert len(jobs) == sum(len(run.cell.jobs) for run in planned.values())
    assert not jobs.duplicated(["run_id", "job_index"]).any()
    # routed by GPU type: each run ran on a node carrying its accelerator_type resource
    session = store.read_meta()["sessions"][-1]
    assert session["backend"] == "ray" and session["runs_executed"] == 8 and session["complete"]
    assert session["requeued"] == {killed["run_id"]: 1} and session["lost"] == {}
    for run_id, where in session["placements"].items():
        assert cluster[where["node_id"]] == TYPES[planned[run_id].cell.gpu_type], run_id
    assert events[-1].done == events[-1].total == 8
    # the same campaign through the CLI resumes: nothing to run, nothing duplicated, the same summary
    spec_path = tmp_path / "campaign.yaml"
    spec_path.write_text(yaml.safe_dump(CAMPAIGN))
    result = CliRunner().invoke(app, ["profile", str(spec_path), "--backend", "ray", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    cells = json.loads(result.stdout[result.stdout.index("{"):])["cells"]
    assert len(cells) == 4 and {c["status"] for c in cells} == {"ok"} and {c["ok"] for c in cells} == {2}
    again = ResultsStore(tmp_path)
    assert again.read_meta()["sessions"][-1]["runs_executed"] == 0
    assert sorted(again.runs()["run_id"]) == sorted(planned)


def test_campaign_refuses_a_gpu_type_the_cluster_lacks(cluster, tmp_path: Path) -> None:
    from profiler.campaign.ray_backend import run_campaign_on_ray

    spec = spec_from_dict({**CAMPAIGN, "gpu_types": ["h100", "t4"]})
    with pytest.raises(InputError) as info:
        run_campaign_on_ray(spec, tmp_path)
    message = str(info.value)
    assert "gpu_types[1]" in message and "accelerator_type:T4" in message and "a100" in message
    assert "\n" not in message
    assert not ResultsStore(tmp_path).runs().shape[0]


def test_two_pairs_launched_on_ray_train_on_nodes_of_their_type(cluster, tmp_path: Path) -> None:
    from scheduler.executor.command import RunSettings
    from scheduler.executor.local import LaunchSettings
    from scheduler.executor.plan import build_plan
    from scheduler.executor.ray.backend import run_plan_on_ray

    allocation = {"allocations": [
        {"job": "a", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": "b", "node": 0, "gpus": [0]},
        {"job": "b", "gpu_type": "h100", "num_gpus": 1, "batch_size": 4, "partner": "a", "node": 0, "gpus": [0]},
        {"job": "c", "gpu_type": "a100", "num_gpus": 1, "batch_size": 8, "partner": "d", "node": 0, "gpus": [1]},
        {"job": "d", "gpu_type": "a100", "num_gpus": 1, "batch_size": 8, "partner": "c", "node": 0, "gpus": [1]},
    ], "unallocated": []}
    plan = build_plan(allocation, applications={name: "tiny_cnn" for name in "abcd"})
    # long enough (seconds, even on a fast machine) that the 0.5 s progress polls see the jobs mid-run
    steps, log_every = 1000, 500
    settings = LaunchSettings(run=RunSettings(device="cpu", steps=steps, log_every=log_every),
                              log_dir=tmp_path / "logs")
    seen: list[dict[str, tuple[str, int]]] = []
    report = run_plan_on_ray(plan, settings, on_progress=lambda statuses: seen.append(
        {s.job: (s.state, s.step) for s in statuses}))

    assert not report.interrupted and report.ok
    assert {j.job: (j.state, j.step) for j in report.jobs} == {name: ("finished", steps) for name in "abcd"}
    assert all(j.samples_per_s and j.samples_per_s > 0 for j in report.jobs)
    ran_on = {j.job: cluster[j.node_id] for j in report.jobs}
    assert ran_on == {"a": "H100", "b": "H100", "c": "A100", "d": "A100"}
    # progress was streamed while the jobs ran, not only reported at the end
    assert any(0 < step < steps for snapshot in seen for state, step in snapshot.values() if state == "running")
    for job in report.jobs:
        log = Path(job.log).read_text()
        assert f"[{job.job}] step {log_every}" in log and f"[{job.job}] finished after {steps} steps" in log
        progress = json.loads(Path(job.log).with_name(Path(job.log).stem + ".progress.json").read_text())
        assert progress["state"] == "finished"
