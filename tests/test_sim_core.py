"""Simulator core: a hand-computed scenario, invariants on random workloads for every policy, determinism."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pandas as pd
import pytest

from scheduler.formats.workload_jobs import Workload, WorkloadJob
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.policy import PackingPolicy
from scheduler.model.cluster import cluster_from_dict
from scheduler.model.colocation import ColocationTable
from scheduler.model.goodput import TableGoodputModel
from scheduler.model.policy import Allocation, PolicyTraits, RoundDecision, SolverInfo
from scheduler.policies import POLICY_NAMES, make_policy
from scheduler.sim.checks import SimulationError
from scheduler.sim.config import SimConfig
from scheduler.sim.simulator import simulate

NO_COSTS = SimConfig(round_s=60.0, restart_cost_s={}, default_restart_cost_s=0.0, slowdown={})


def one_gpu():
    return cluster_from_dict({"gpu_types": {"g": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})


def two_jobs(work_a: float = 1200.0, work_b: float = 1800.0) -> Workload:
    return Workload("two", (WorkloadJob("A", "a", 0.0, 1, 32, work=work_a), WorkloadJob("B", "b", 0.0, 1, 32, work=work_b)))


def jcts(result) -> dict[str, float]:
    return dict(zip(result.jobs["job"], result.jobs["jct_s"]))


# --------------------------------------------------------------------------------------------------
# Hand-computed scenario: two jobs, one GPU, solo 10 samples/s each
# --------------------------------------------------------------------------------------------------

GOODPUT = TableGoodputModel({("a", "g", 1): 10.0, ("b", "g", 1): 10.0})


def test_packed_pair_hand_computed_jcts():
    # packed at ratios (0.8, 0.6): A runs at 8/s and finishes 1200 samples at 150 s; B has done 6·150 = 900,
    # then runs alone at 10/s for the remaining 900: 90 s more, done at 240 s.
    table = ColocationTable.from_rows([("g", "a", "b", 0.8, 0.6)])
    policy = PackingPolicy(IlpConfig(p=1.0, min_benefit=0.0), name="colocate")
    result = simulate(one_gpu(), two_jobs(), policy, colocation=table, profiles=GOODPUT, config=NO_COSTS)
    got = jcts(result)
    assert got["A"] == pytest.approx(150.0, abs=1e-6)
    assert got["B"] == pytest.approx(240.0, abs=1e-6)
    s = result.summary
    assert s["avg_jct_s"] == pytest.approx(195.0)
    assert s["makespan_s"] == pytest.approx(240.0)
    assert s["gpu_hours"] == pytest.approx(240.0 / 3600)  # one GPU held from 0 to 240 s
    assert s["packed_fraction"] == pytest.approx(150.0 / 240.0)
    assert s["restarts"] == 0


def test_restart_cost_delays_both_jobs_by_the_restore():
    # both restore for 30 s first: A 30 + 150 = 180 s; B 900 samples by 180 s, 90 s alone: 270 s
    table = ColocationTable.from_rows([("g", "a", "b", 0.8, 0.6)])
    policy = PackingPolicy(IlpConfig(p=1.0, min_benefit=0.0), name="colocate")
    cfg = SimConfig(round_s=60.0, restart_cost_s={"a": 30.0, "b": 30.0}, slowdown={})
    got = jcts(simulate(one_gpu(), two_jobs(), policy, colocation=table, profiles=GOODPUT, config=cfg))
    assert got["A"] == pytest.approx(180.0, abs=1e-6)
    assert got["B"] == pytest.approx(270.0, abs=1e-6)


def test_fifo_runs_the_jobs_back_to_back():
    # A alone 120 s; B starts at the next round boundary (120 s) and needs 180 s: 300 s
    got = jcts(simulate(one_gpu(), two_jobs(), "fifo", profiles=GOODPUT, config=NO_COSTS))
    assert got["A"] == pytest.approx(120.0, abs=1e-6)
    assert got["B"] == pytest.approx(300.0, abs=1e-6)


def test_gandiva_unpacks_a_pair_that_is_slower_than_taking_turns():
    # ratios (0.5, 0.3), Σ < 1: packed in round 0 (A 300, B 180 samples), unpacked in round 1; A alone needs
    # 90 s more (done 150 s); B waits (the pair is blacklisted) until round 3 at 180 s, then 1620/10 = 162 s.
    table = ColocationTable.from_rows([("g", "a", "b", 0.5, 0.3)])
    result = simulate(one_gpu(), two_jobs(), "gandiva", colocation=table, profiles=GOODPUT, config=NO_COSTS)
    got = jcts(result)
    assert got["A"] == pytest.approx(150.0, abs=1e-6)
    assert got["B"] == pytest.approx(342.0, abs=1e-6)
    assert result.allocations[result.allocations["round"] == 0]["partner"].notna().all()
    assert result.allocations[result.allocations["round"] >= 1]["partner"].isna().all()


def test_sia_never_packs_and_colocate_beats_it_when_packing_pays():
    table = ColocationTable.from_rows([("g", "a", "b", 0.8, 0.6)])
    sia = simulate(one_gpu(), two_jobs(), PackingPolicy(IlpConfig(p=1.0, packing=False), name="sia"),
                   colocation=table, profiles=GOODPUT, config=NO_COSTS)
    assert sia.summary["packed_fraction"] == 0.0
    assert sia.allocations["partner"].isna().all()
    # back to back in either order (both have normalised goodput 1: a tie): A 120 s then B 300 s, or B 180 s then A
    got = sorted(jcts(sia).values())
    assert got == pytest.approx([120.0, 300.0]) or got == pytest.approx([180.0, 300.0])


# --------------------------------------------------------------------------------------------------
# Invariants on random workloads, every policy
# --------------------------------------------------------------------------------------------------

SMALL = cluster_from_dict({"gpu_types": {
    "fast": {"nodes": 1, "gpus_per_node": 4, "memory_gb": 40},
    "slow": {"nodes": 2, "gpus_per_node": 2, "memory_gb": 16},
}})
APPS = ("x", "y", "z")


def random_setup(seed: int):
    rng = random.Random(seed)
    table = {}
    for app in APPS:
        base = {"fast": rng.uniform(20, 40), "slow": rng.uniform(5, 20)}
        for t, rate in base.items():
            for n in (1, 2, 4):
                table[(app, t, n)] = rate * n ** rng.uniform(0.6, 0.95)
    rows = []
    for t in ("fast", "slow"):
        for i, a in enumerate(APPS):
            for b in APPS[i:]:
                rows.append((t, a, b, round(rng.uniform(0.3, 0.9), 3), round(rng.uniform(0.3, 0.9), 3)))
    jobs = []
    for k in range(rng.randint(7, 10)):
        app = rng.choice(APPS)
        gpus = rng.choice((1, 1, 2, 4))
        jobs.append(WorkloadJob(f"{app}-{k}", app, float(rng.randint(0, 900)), gpus, 64,
                                work=rng.uniform(2_000, 20_000)))
    return TableGoodputModel(table), ColocationTable.from_rows(rows), Workload(f"random-{seed}", tuple(jobs))


def assert_logs_consistent(result, cluster) -> None:
    """An independent check of the per-round allocation log: capacity, GPU sharing, no job after completion."""
    alloc = result.allocations
    jobs = result.jobs.set_index("job")
    assert jobs["completed"].all(), jobs[~jobs["completed"]]
    for (rnd, gpu_type), rows in alloc.groupby(["round", "gpu_type"]):
        units = {}
        for r in rows.itertuples():
            key = tuple(sorted((r.job, *r.partner.split(",")))) if isinstance(r.partner, str) else (r.job,)
            units[key] = r.num_gpus
        assert sum(units.values()) <= cluster.capacity(gpu_type), (rnd, gpu_type, units)
        slots: dict[tuple, list[str]] = {}
        for r in rows.itertuples():
            for node in r.nodes.split(","):
                for gpu in r.gpus.split(","):
                    slots.setdefault((node, gpu), []).append(r.job)
        for slot, names in slots.items():
            assert len(names) <= 3, (rnd, slot, names)
            for name in names:  # every job on a GPU names the others as its group
                if len(names) > 1:
                    group = rows.set_index("job").loc[name, "partner"].split(",")
                    assert sorted(group) == sorted(n for n in names if n != name), (rnd, slot, names)
    last_round = alloc.groupby("job")["time_s"].max()
    for name, t in last_round.items():
        assert t < jobs.loc[name, "completion_s"] + 1e-6
    assert (jobs["jct_s"] > 0).all()


@pytest.mark.parametrize("policy", POLICY_NAMES)
@pytest.mark.parametrize("seed", [0, 1])
def test_invariants_hold_on_random_workloads(policy, seed):
    goodput, table, workload = random_setup(seed)
    cfg = SimConfig(round_s=60.0, seed=seed, restart_cost_s={}, default_restart_cost_s=20.0, slowdown={})
    result = simulate(SMALL, workload, policy, colocation=table, profiles=goodput, config=cfg)
    assert result.summary["completed"] == len(workload)
    assert_logs_consistent(result, SMALL)
    # a job can never beat running alone on the fastest configuration the whole time
    best = {app: max(v for (a, _, _), v in goodput.table.items() if a == app) for app in APPS}
    for row in result.jobs.itertuples():
        assert row.jct_s >= row.work / best[row.application] - 1e-6


# --------------------------------------------------------------------------------------------------
# Violations stop the run naming round and job
# --------------------------------------------------------------------------------------------------

@dataclass
class _Broken:
    mode: str
    name: str = "broken"
    traits: PolicyTraits = PolicyTraits(max_group_size=2)

    def allocate(self, jobs, cluster, context):
        names = [j.name for j in jobs]
        info = SolverInfo("test", "ok", 0.0, 0.0)
        if self.mode == "overbook":
            allocs = tuple(Allocation(n, "g", 1, 32) for n in names)
            return RoundDecision(allocs, (), 0.0, info)
        if self.mode == "lose":
            return RoundDecision((), tuple(names[1:]), 0.0, info)
        if self.mode == "unknown-pair":
            a, b = names[:2]
            return RoundDecision((Allocation(a, "g", 1, 32, b), Allocation(b, "g", 1, 32, a)), (), 0.0, info)
        raise AssertionError(self.mode)


@pytest.mark.parametrize("mode, words", [
    ("overbook", ["round 0", "job B", "capacity"]),
    ("lose", ["round 0", "job A", "lost"]),
    ("unknown-pair", ["round 0", "job A", "co-location"]),
])
def test_violation_names_round_and_job(mode, words):
    with pytest.raises(SimulationError) as info:
        simulate(one_gpu(), two_jobs(), _Broken(mode), colocation=ColocationTable.from_rows([]), profiles=GOODPUT,
                 config=NO_COSTS)
    message = str(info.value)
    assert all(w in message for w in words), message


# --------------------------------------------------------------------------------------------------
# Determinism
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["colocate", "gandiva", "gavel-packed"])
def test_same_seed_same_run(policy):
    goodput, table, workload = random_setup(3)
    cfg = SimConfig(round_s=60.0, seed=7, restart_cost_s={}, default_restart_cost_s=20.0, slowdown={})
    first = simulate(SMALL, workload, policy, colocation=table, profiles=goodput, config=cfg)
    second = simulate(SMALL, workload, make_policy(policy, seed=7), colocation=table, profiles=goodput, config=cfg,
                      adaptive=policy == "colocate")
    pd.testing.assert_frame_equal(first.jobs, second.jobs)
    pd.testing.assert_frame_equal(first.allocations, second.allocations)
    keys = [k for k in first.summary if k != "wall_s"]
    assert {k: first.summary[k] for k in keys} == {k: second.summary[k] for k in keys}
