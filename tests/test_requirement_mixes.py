"""Random mixes of per-job requirements (``max_slowdown``, ``exclusive``, memory, adaptivity) over several
applications, side by side, through ``schedule``, ``simulate`` and a live round.

Two jobs of one type, one with a slowdown bound of its own and one without, once made every round fail
(the candidate search sorted job classes whose keys held ``None`` beside a float): single cases never mixed
requirements, so these properties draw whole mixes. Each run must succeed, and its decision must honour every
job's requirement: an exclusive job alone on its GPUs, no member of a group beyond its bound by the table the
policy planned with, a group's memory within its GPU's."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.formats.bundled import CLUSTER_FILE
from scheduler.formats.colocation_table import load_colocation_table
from scheduler.model.cluster import cluster_from_dict
from scheduler.model.colocation import ColocationTable, class_key  # noqa
from scheduler.model.jobs import Job, JobRequirements
from scheduler.model.memory import group_fits
from tests.test_fuzz_inputs import run_cli

EXAMPLES = Path(__file__).resolve().parents[1] / "scheduler" / "examples"
MIXES = settings(max_examples=30, derandomize=True, database=None, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SLOW_MIXES = settings(MIXES, max_examples=6)

BOUNDS = st.sampled_from([None, None, 1.2, 1.5, 2.0, 3.0, 8.0])
REQUIREMENTS = st.fixed_dictionaries({
    "max_slowdown": BOUNDS, "exclusive": st.sampled_from([False, False, False, True]),
    "memory_gb": st.sampled_from([None, 2.0, 6.0, 14.0, 30.0]), "adaptive": st.booleans(),
})
# (application, batch) pairs of the example tables: resnet18 and resnet50 pair on both types, transformer on a100
APPS = st.sampled_from([("resnet18", 128), ("resnet18", 128), ("resnet50", 64), ("transformer", 32)])
JOBS = st.lists(st.tuples(APPS, REQUIREMENTS), min_size=2, max_size=12)


def test_one_bounded_job_among_unbounded_ones_of_its_type_is_scheduled(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("name,application,num_gpus,batch_size,adaptive,memory_gb,max_slowdown\n"
                    "r1,resnet18,1,128,false,3,\nr2,resnet18,1,128,false,3,\nr3,resnet18,1,128,false,3,3.0\n")
    code, out, err = _schedule(jobs)
    assert code == 0, err
    assert {a["job"] for a in json.loads(out)["allocations"]} == {"r1", "r2", "r3"}


def test_job_classes_with_and_without_their_own_bound_sort() -> None:
    classes = [class_key(Job("a", "resnet18", batch_size=128, requirements=JobRequirements(max_slowdown=b, exclusive=e)))
               for b in (None, 3.0, 1.5, None) for e in (False, True)]
    assert sorted(classes)[0].has_own_bound is False  # jobs on the cluster-wide bound first
    assert len(set(classes)) == 6  # None and each bound, exclusive or not: distinct classes


def _write_jobs(path: Path, mix: list) -> Path:
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["name", "application", "num_gpus", "max_gpus", "batch_size", "min_batch_size",
                      "max_batch_size", "adaptive", "memory_gb", "max_slowdown", "exclusive"])
        for n, ((app, batch), req) in enumerate(mix):
            adaptive = req["adaptive"]
            out.writerow([f"j{n}", app, 1, 2 if adaptive else "", batch, batch // 2 if adaptive else "",
                          batch * 2 if adaptive else "", str(adaptive).lower(), req["memory_gb"] or "",
                          req["max_slowdown"] or "", str(req["exclusive"]).lower()])
    return path


def _schedule(jobs: Path, *extra: str) -> tuple[int, str, str]:
    return run_cli("schedule", "--cluster", str(EXAMPLES / "cluster-small.yaml"), "--jobs", str(jobs),
                   "--profiles", str(EXAMPLES / "profiles-generic.csv"),
                   "--colocation", str(EXAMPLES / "colocation-small.csv"), "--json", *extra)


@MIXES
@given(mix=JOBS, triples=st.booleans())
def test_schedule_honours_every_mix_of_requirements(tmp_path_factory: pytest.TempPathFactory, mix: list,
                                                    triples: bool) -> None:
    jobs = _write_jobs(tmp_path_factory.mktemp("mix") / "jobs.csv", mix)
    code, out, err = _schedule(jobs, "--max-group-size", "3" if triples else "2")
    assert code == 0 and "Traceback" not in err, err
    allocations = json.loads(out)["allocations"]
    table = load_colocation_table(EXAMPLES / "colocation-small.csv")
    memory = {t.name: t.memory_gb for t in cluster_from_dict(_cluster_dict())}
    requirements = {f"j{n}": (app, batch, req) for n, ((app, batch), req) in enumerate(mix)}
    for a in allocations:
        app, batch, req = requirements[a["job"]]
        if req["exclusive"]:
            assert not a["partners"], a
        if not a["partners"]:
            continue
        members = [a["job"], *a["partners"]]
        assert not any(requirements[m][2]["exclusive"] for m in members)
        assert group_fits(memory[a["gpu_type"]], [requirements[m][2]["memory_gb"] for m in members])
        if len(members) == 2:
            other = requirements[a["partners"][0]]
            ratios = table.lookup(a["gpu_type"], Job("x", app, batch_size=batch),
                                  Job("y", other[0], batch_size=other[1]))
            bound = req["max_slowdown"] or 2.5
            assert ratios is not None and ratios[0] >= 1 / bound - 1e-9, (a, ratios, bound)


def _cluster_dict() -> dict:
    import yaml

    return yaml.safe_load((EXAMPLES / "cluster-small.yaml").read_text())


@pytest.mark.slow
@SLOW_MIXES
@given(bounds=st.lists(BOUNDS, min_size=24, max_size=24), exclusive=st.lists(st.booleans(), min_size=24, max_size=24))
def test_simulate_runs_every_mix_of_bounds_to_completion(tmp_path_factory: pytest.TempPathFactory, bounds: list,
                                                         exclusive: list) -> None:
    """The bundled demo workload (24 jobs, Sia's applications) with a bound or ``exclusive`` on random rows."""
    rows = list(csv.DictReader((EXAMPLES / "demo-workload.csv").open()))
    path = tmp_path_factory.mktemp("sim") / "workload.csv"
    with path.open("w", newline="") as fh:
        out = csv.DictWriter(fh, fieldnames=[*rows[0], "max_slowdown", "exclusive"])
        out.writeheader()
        for row, bound, alone in zip(rows, bounds, exclusive):
            out.writerow({**row, "max_slowdown": bound or "", "exclusive": "true" if alone else ""})
    code, out_text, err = run_cli("simulate", "--cluster", str(CLUSTER_FILE), "--workload", str(path),
                                  "--policy", "colocate", "--json")
    assert code == 0, err
    summary = json.loads(out_text.strip().splitlines()[-1])
    assert summary["completed"] == len(rows)
    assert summary["worst_slowdown"] <= max([b or 2.5 for b in bounds]) + 1e-6


SCALINGS = st.lists(st.sampled_from([None, None, "adascale", "linear", "sqrt", "none"]), min_size=6, max_size=6)


@SLOW_MIXES
@given(reqs=st.lists(REQUIREMENTS, min_size=4, max_size=6), scalings=SCALINGS)
def test_a_live_round_schedules_every_mix_of_requirements(tmp_path_factory: pytest.TempPathFactory,
                                                          reqs: list, scalings: list) -> None:
    """``serve``'s own round (real SQLite, real processes) with a prior that makes any two jobs pay, and more
    jobs than GPUs: the round succeeds, an exclusive job never shares, an adaptive job that has reported no
    gradient statistics runs at its job file's batch (M0), and a job gets ``COLOCATE_LR_SCALING`` exactly when its
    job file names one."""
    from scheduler.executor.registry import make_executor
    from scheduler.service.config import ServeConfig
    from scheduler.service.jobs.jobspec import job_from_dict
    from scheduler.service.server import Server
    from scheduler.service.state.store import StateStore
    from tests.serve_helpers import kill_groups

    root = tmp_path_factory.mktemp("live")
    state = StateStore(root / "state")
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}}})
    prior = ColocationTable.from_rows([("t4", "mine", "mine", 0.9, 0.9)])
    server = Server(state, cluster, make_executor("local"), ServeConfig(round_s=0.2, device="cpu", stop_grace_s=5),
                    colocation=prior)
    server.acquire()
    try:
        for n, req in enumerate(reqs):
            spec = {"name": f"j{n}", "command": "sleep 30", "application": "mine", "steps": 100, "batch_size": 16}
            if req["adaptive"]:
                spec.update(adaptive=True, min_batch_size=8, max_batch_size=32)
            spec.update({k: req[k] for k in ("max_slowdown", "memory_gb") if req[k] is not None})
            if req["exclusive"]:
                spec["exclusive"] = True
            if scalings[n] is not None:
                spec["lr_scaling"] = scalings[n]
            state.submit(job_from_dict(spec))
        for _ in range(2):
            server.round()
        rows = {r.name: r for r in state.jobs()}
        running = [r for r in rows.values() if r.state == "running"]
        assert running, "two free GPUs and no job started"
        for n, req in enumerate(reqs):
            row = rows[f"j{n}"]
            if req["exclusive"] and row.state == "running":
                assert not row.others, row
            for other in row.others if row.state == "running" else ():
                assert not reqs[int(other[1:])]["exclusive"]
            if row.state == "running":
                assert row.batch_size == 16, row  # M0: no job here has reported statistics
        for group in state.groups().values():
            for member in group.doc.jobs:
                assert member.env.get("COLOCATE_LR_SCALING") == scalings[int(member.name[1:])], member
    finally:
        kill_groups(state.dir)


def test_a_mix_with_every_requirement_keeps_its_classes_apart() -> None:
    """Jobs identical but for their requirements land in different classes (a class shares a table's answers)."""
    base = Job("a", "resnet18", batch_size=128)
    variants = [replace(base, requirements=JobRequirements(max_slowdown=bound, exclusive=alone))
                for bound in (None, 2.0) for alone in (False, True)]
    assert len({class_key(j) for j in variants}) == 4
