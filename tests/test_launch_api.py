"""`scheduler.executor.launch`: the library call behind `colocate launch` (checks, node selection, emitters, back ends)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.errors import InputError
from scheduler.executor.launch import LaunchRequest, launch, select_node

TWO_NODES = {"allocations": [
    {"job": "a", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": "b", "node": 0, "gpus": [0]},
    {"job": "b", "gpu_type": "h100", "num_gpus": 1, "batch_size": 4, "partner": "a", "node": 0, "gpus": [0]},
    {"job": "c", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": None, "node": 1, "gpus": [0],
     "application": "tiny_cnn"},
], "unallocated": ["d"]}


@pytest.fixture
def allocation(tmp_path: Path) -> Path:
    path = tmp_path / "alloc.json"
    entries = [{**e, "application": "tiny_cnn"} for e in TWO_NODES["allocations"]]
    path.write_text(json.dumps({**TWO_NODES, "allocations": entries}))
    return path


BAD_REQUESTS = [
    ({"sharing": "mpss"}, "--sharing"), ({"device": "gpu"}, "--device"), ({"steps": -1}, "--steps"),
    ({"threads": 0}, "--threads"), ({"duration_s": 0.0}, "--duration"), ({"backend": "nomad"}, "--backend"),
    ({"emit": ("nomad", Path("x"))}, "--emit"), ({"sbatch_options": ("time=1",)}, "--sbatch-option"),
    ({"sbatch_options": ("--time=1\ntouch x",)}, "--sbatch-option"), ({"grace_s": float("nan")}, "--grace"),
    ({"num_cpus": 0.0}, "--num-cpus"), ({"image_size": 8}, "--image-size"), ({"steps": 10**12}, "--steps"),
    ({"duration_s": float("inf")}, "--duration"),
    ({"sbatch_options": ("--comment=two words",)}, "--sbatch-option"), ({"sbatch_options": ("--array=1-3",)},
                                                                         "--sbatch-option"),
    ({"sbatch_options": ("--constraint=ib",)}, "--sbatch-option"),  # the script's own --constraint=GPU_TYPE
]


@pytest.mark.parametrize(("changes", "flag"), BAD_REQUESTS)
def test_request_checks_every_option_with_one_line(changes: dict, flag: str) -> None:
    """The library names the request's field; the command line names its flag."""
    from click.testing import CliRunner

    from colocate.cli import app

    with pytest.raises(InputError) as info:
        LaunchRequest(Path("alloc.json"), **changes)
    (field,) = changes
    assert f"field '{field}'" in str(info.value) and "\n" not in str(info.value)
    args = []
    for name, value in changes.items():
        values = value if isinstance(value, tuple) else (value,)
        if name == "sbatch_options":
            args += [f"--sbatch-option={v}" for v in values]
        else:
            args += [flag, *map(str, values)]
    result = CliRunner().invoke(app, ["launch", "alloc.json", *args])
    assert isinstance(result.exception, InputError) and f"field '{flag}'" in str(result.exception), result.output


def test_emit_writes_files_and_shows_the_plan_first(allocation: Path, tmp_path: Path) -> None:
    seen = []
    outcome = launch(LaunchRequest(allocation, emit=("slurm", tmp_path / "out")), on_plan=seen.append)
    assert outcome.report is None and outcome.emitted is not None
    assert [p.name for p in outcome.emitted.files] == ["g00-a+b.sbatch", "g01-c.sbatch"]
    assert all(p.is_file() for p in outcome.emitted.files) and "submit_all.sh" in outcome.emitted.hint
    assert seen == [outcome.plan] and outcome.plan.not_launched == ("d",)


def test_local_backend_needs_a_node_when_the_allocation_spans_several(allocation: Path) -> None:
    with pytest.raises(InputError, match="uses 2 nodes: h100:0, h100:1"):
        launch(LaunchRequest(allocation, device="cpu"))
    with pytest.raises(InputError, match="valid: h100:0, h100:1, all"):
        launch(LaunchRequest(allocation, device="cpu", node="h100:7"))


def test_select_node_keeps_that_nodes_groups(allocation: Path) -> None:
    from scheduler.executor.launch import load_launch_plan

    plan = load_launch_plan(LaunchRequest(allocation))
    assert [g.label for g in select_node(plan, "h100:1").groups] == ["c"]
    assert select_node(plan, "all") is plan


@pytest.mark.slow
def test_local_backend_runs_real_jobs_to_their_step_count(allocation: Path, tmp_path: Path) -> None:
    statuses: list[list] = []
    request = LaunchRequest(allocation, device="cpu", node="h100:1", steps=3, log_dir=tmp_path / "logs")
    outcome = launch(request, on_progress=statuses.append)
    assert outcome.report is not None and outcome.report.ok and not outcome.report.interrupted
    (job,) = outcome.report.jobs
    assert job.job == "c" and job.state == "finished" and job.step == 3
    assert statuses and (tmp_path / "logs").is_dir()


def test_cluster_refuses_indices_outside_it(allocation: Path, tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("gpu_types:\n  h100: {nodes: 1, gpus_per_node: 8, memory_gb: 80}\n")
    with pytest.raises(InputError) as info:  # job c sits on node 1 of a one-node cluster
        launch(LaunchRequest(allocation, cluster=cluster, emit=("slurm", tmp_path / "emit")))
    assert "nodes" in str(info.value) and "node 1" in str(info.value)
    assert not (tmp_path / "emit").exists()


def test_allowed_sbatch_options_reach_the_scripts(allocation: Path, tmp_path: Path) -> None:
    options = ("--account=ml", "--exclusive", "--constraint=ib")  # --constraint: --typed-gres leaves it to the user
    outcome = launch(LaunchRequest(allocation, emit=("slurm", tmp_path / "out"), typed_gres=True,
                                   sbatch_options=options))
    assert outcome.emitted is not None
    text = outcome.emitted.files[0].read_text()
    assert all(f"#SBATCH {option}\n" in text for option in options)
