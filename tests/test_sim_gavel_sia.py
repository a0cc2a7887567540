"""Gavel as Sia's simulator runs it (``mechanism="sia"``, the simulator's default) against the earlier
work-conserving mechanism (``"refill"``), Sia's split placement of rigid jobs, and Sia's restart rule
(a restart on any change of GPU type or GPUs per node). No shared data needed: explicit goodput tables."""

from __future__ import annotations

import pytest

from common.errors import InputError
from scheduler.formats.workload_jobs import Workload, WorkloadJob
from scheduler.model.cluster import cluster_from_dict
from scheduler.model.goodput import GoodputEstimate, TableGoodputModel
from scheduler.model.jobs import Job
from scheduler.model.placement import place
from scheduler.model.policy import Allocation, JobPlacement, Placement, RoundContext
from scheduler.policies.common import Shape, make_decision
from scheduler.policies.gavel import GavelPolicy, _Option
from scheduler.sim.config import SimConfig
from scheduler.sim.simulator import Simulator, _Run, resolve_policy, simulate

ONE_NODE = {"gpu_types": {"g": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}}}
MODEL = TableGoodputModel({("a", "g", 1): 1.0, ("a", "g", 2): 2.0})


def _round(policy: GavelPolicy, jobs: list[Job], t: float) -> set[str]:
    cluster = cluster_from_dict(ONE_NODE)
    decision = policy.allocate(jobs, cluster, RoundContext(goodput=MODEL, time_s=t))
    return {a.job for a in decision.allocations}


def test_sia_mechanism_holds_allocations_until_the_next_gavel_round():
    a, b, c = (Job(n, "a", arrival=0.0, num_gpus=1, batch_size=32) for n in "ABC")
    sia, refill = GavelPolicy(mechanism="sia"), GavelPolicy(mechanism="refill")
    assert _round(sia, [a, b], 0.0) == set()  # Sia's first decision comes one round in
    assert _round(refill, [a, b], 0.0) == {"A", "B"}
    assert _round(sia, [a, b], 360.0) == {"A", "B"}
    # C arrives mid-round: Sia's Gavel makes it wait for the next round
    assert _round(sia, [a, b, c], 420.0) == {"A", "B"}
    # A finished: Sia leaves its GPU idle until the round ends, the refill mechanism gives it to C
    assert _round(sia, [b, c], 480.0) == {"B"}
    assert _round(refill, [b, c], 120.0) == {"B", "C"}
    assert _round(sia, [b, c], 720.0) == {"B", "C"}


def _tie() -> tuple[list[Job], list[_Option]]:
    jobs = [Job("x", "a"), Job("y", "a")]
    est = (GoodputEstimate(10, 10.0, 1.0),)
    return jobs, [_Option((n,), Shape("g", 1, 1), est, (1.0,)) for n in ("x", "y")]


def test_sia_mechanism_takes_an_interior_point_of_a_tied_lp():
    cluster = cluster_from_dict({"gpu_types": {"g": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
    jobs, options = _tie()
    central = GavelPolicy(mechanism="sia")._solve(jobs, cluster, options)
    assert [central.get(((n,), "g"), 0.0) for n in ("x", "y")] == [pytest.approx(0.5, abs=1e-3)] * 2
    vertex = GavelPolicy(mechanism="refill")._solve(jobs, cluster, options)
    assert sorted(vertex.get(((n,), "g"), 0.0) for n in ("x", "y")) == [pytest.approx(0.0, abs=1e-6), 1.0]


def test_sia_mechanism_rejects_packing():
    with pytest.raises(InputError, match="mechanism"):
        GavelPolicy(packing=True, mechanism="sia")
    with pytest.raises(InputError, match="refill, sia"):
        GavelPolicy(mechanism="sometimes")


def test_split_placement_reserves_exactly_the_jobs_gpus():
    cluster = cluster_from_dict({"gpu_types": {"g": {"nodes": 3, "gpus_per_node": 4, "memory_gb": 16}}})
    six = Allocation("J", "g", 6, 32, num_nodes=2)
    assert place([six], cluster).unplaced == ("J",)  # whole nodes only
    jp = place([six], cluster, split=True).of("J")
    assert jp is not None and jp.per_node == (4, 2) and jp.num_gpus == 6 and len(jp.slots()) == 6
    # a kept split job stays where it was while its GPUs are free
    kept = place([six, Allocation("K", "g", 4, 32)], cluster, place([six], cluster, split=True), split=True)
    assert kept.of("J") == jp and kept.of("K") is not None and kept.of("K").nodes == (2,)


def _restart_counts(restart_on: str) -> list[int]:
    cluster = cluster_from_dict({"gpu_types": {"g": {"nodes": 3, "gpus_per_node": 4, "memory_gb": 16}}})
    model = TableGoodputModel({("a", "g", 6): 6.0})
    work = Workload("w", (WorkloadJob("A", "a", 0.0, 6, 32, work=1e6),))
    policy, adaptive, _ = resolve_policy("fifo")
    sim = Simulator(cluster, work, policy, model, None, SimConfig(restart_on=restart_on), adaptive=adaptive)
    run = _Run(pending=list(sim.states.values()))
    sim._arrivals(run)
    counts = []
    # six GPUs as 4+2, then 2+4 on other nodes (same GPUs and nodes, another layout), then 4+2 again
    for nodes, layout in (((0, 1), ((0, 1, 2, 3), (0, 1))), ((1, 2), ((0, 1), (0, 1, 2, 3))),
                          ((0, 1), ((0, 1, 2, 3), (0, 1)))):
        alloc = Allocation("A", "g", 6, 32, num_nodes=2)
        placement = Placement({"A": JobPlacement("A", "g", nodes, layout[0], layout=layout)}, ())
        sim._apply(run, make_decision([Job("A", "a")], [alloc], "scripted", 0.0), placement)
        counts.append(run.active["A"].restarts)
    return counts


@pytest.mark.parametrize("restart_on, expected", [("placement", [0, 1, 2]), ("shape", [0, 0, 0])])
def test_sias_restart_rule_counts_a_new_layout_over_nodes(restart_on, expected):
    assert _restart_counts(restart_on) == expected


def test_simulated_gavel_runs_sias_rounds_and_arrivals_wait_for_them_unlike_refill():
    work = Workload("w", (WorkloadJob("A", "a", 0.0, 1, 32, work=60.0), WorkloadJob("B", "a", 0.0, 1, 32, work=1e4),
                          WorkloadJob("C", "a", 30.0, 1, 32, work=60.0)))
    jct = {}
    for mode, policy in (("sia", "gavel-sia"), ("refill", "gavel-refill")):
        result = simulate(cluster_from_dict(ONE_NODE), work, policy, profiles=MODEL, adaptive=False)
        jct[mode] = result.jobs.set_index("job")["jct_s"]["C"]
    assert jct["sia"] > 300 > jct["refill"]  # C starts at the 360-s round, or as soon as A leaves


class _Rising(TableGoodputModel):
    """Goodput that grows with the job's progress, as statistical efficiency does over training."""

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None:
        est = super().estimate(job, gpu_type, num_gpus, num_nodes)
        return None if est is None else GoodputEstimate(est.batch_size, est.throughput * (1 + 9 * job.progress), 1.0)


@pytest.mark.parametrize("model, faster", [(MODEL, False), (_Rising({("a", "g", 1): 1.0}), True)])
def test_substeps_follow_a_rising_goodput_within_the_round(model, faster, monkeypatch):
    import scheduler.sim.simulator as simulator

    work = Workload("w", (WorkloadJob("A", "a", 0.0, 1, 32, work=600.0),))
    jct = {}
    for n in (1, simulator.SUBSTEPS):  # one reading a round, against the simulator's
        monkeypatch.setattr(simulator, "SUBSTEPS", n)
        jct[n] = simulate(cluster_from_dict(ONE_NODE), work, "fifo", profiles=model).jobs["jct_s"].iloc[0]
    if faster:  # re-reading the rising goodput six times a round finishes sooner
        assert jct[6] < 0.8 * jct[1]
    else:  # a constant goodput gives the same answer either way
        assert jct[6] == pytest.approx(jct[1])
