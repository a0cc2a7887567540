"""Placement: concrete nodes and GPUs, pairs on the same GPUs, jobs kept where they were."""

from __future__ import annotations

import pytest

from colocate.commands.schedule import decision_to_json
from common.errors import InputError
from scheduler.executor.plan import build_plan
from scheduler.model.cluster import Cluster, GpuType
from scheduler.model.jobs import Job
from scheduler.model.placement import place
from scheduler.model.policy import Allocation, RoundDecision, SolverInfo, check_decision


def cluster() -> Cluster:
    return Cluster({"a": GpuType("a", 2, 8, 40), "t": GpuType("t", 3, 4, 16)})


def test_every_allocation_gets_distinct_gpus_and_pairs_share() -> None:
    allocations = [
        Allocation("big", "a", 8, 256),
        Allocation("p1", "a", 2, 64, partner="p2"), Allocation("p2", "a", 2, 64, partner="p1"),
        Allocation("four", "a", 4, 64), Allocation("one", "a", 1, 32),
        Allocation("multi", "t", 8, 128, num_nodes=2), Allocation("t1", "t", 2, 32),
    ]
    placement = place(allocations, cluster())
    assert not placement.unplaced
    occupants = placement.occupants()
    assert occupants[("a", *placement.of("p1").slots()[0][1:])] == ("p1", "p2")
    shared = {names for names in occupants.values() if len(names) > 1}
    assert shared == {("p1", "p2")}  # only the pair shares GPUs
    assert len(occupants) == 8 + 2 + 4 + 1 + 8 + 2  # every other GPU is used by exactly one job
    assert len(placement.of("multi").nodes) == 2 and placement.of("multi").gpus == (0, 1, 2, 3)
    four = placement.of("four")
    assert four.gpus in ((0, 1, 2, 3), (4, 5, 6, 7))  # aligned block


def test_jobs_stay_where_they_were() -> None:
    first = place([Allocation("x", "a", 2, 64), Allocation("y", "a", 4, 64)], cluster())
    # next round y is gone and a new job arrives: x must not move
    second = place([Allocation("x", "a", 2, 64), Allocation("z", "a", 4, 64)], cluster(), previous=first)
    assert second.of("x") == first.of("x")
    # x changes size: it moves (it restarts anyway)
    third = place([Allocation("x", "a", 4, 64)], cluster(), previous=second)
    assert third.of("x").num_gpus == 4


def test_fragmentation_by_kept_jobs_is_undone() -> None:
    c = Cluster({"a": GpuType("a", 2, 4, 40)})
    previous = place([Allocation("s1", "a", 1, 1), Allocation("s2", "a", 1, 1)], c)
    # force the two single-GPU jobs onto different nodes, then ask for a whole node
    from scheduler.model.policy import JobPlacement, Placement

    spread = Placement({"s1": JobPlacement("s1", "a", (0,), (0,)), "s2": JobPlacement("s2", "a", (1,), (0,))})
    result = place([Allocation("s1", "a", 1, 1), Allocation("s2", "a", 1, 1), Allocation("w", "a", 4, 1)], c,
                   previous=spread)
    assert not result.unplaced and previous is not None
    assert result.of("s1").node == result.of("s2").node != result.of("w").node


def test_group_of_three_shares_one_gpu_set_and_becomes_one_launch_group() -> None:
    """A group of three (max_group_size=3) is placed on the same GPUs and read back by the launch plan as one
    GPU group of three jobs."""

    group = [Allocation(n, "t", 1, 32, partner=others[0], partners=others)
             for n, others in (("x", ("y", "z")), ("y", ("x", "z")), ("z", ("x", "y")))]
    decision = RoundDecision(tuple(group + [Allocation("solo", "t", 2, 32)]), (), 0.0, SolverInfo("none", "ok", 0, 0))
    check_decision(decision, [Job(n, "m") for n in ("x", "y", "z", "solo")], cluster())
    assert decision.gpus_used() == {"t": 3}  # the group's GPU counted once
    placement = place(decision, cluster())
    assert not placement.unplaced
    assert {names for names in placement.occupants().values() if len(names) > 1} == {("x", "y", "z")}
    doc = decision_to_json(decision, placement)
    plan = build_plan(doc, commands={n: "echo {job} {partner}" for n in ("x", "y", "z", "solo")})
    sizes = sorted(len(g.jobs) for g in plan.groups)
    assert sizes == [1, 3]
    broken = dict(doc, allocations=[dict(a, partners=["x"]) if a["job"] == "z" else a for a in doc["allocations"]])
    with pytest.raises(InputError, match="does not name it back"):
        build_plan(broken, commands={n: "echo" for n in ("x", "y", "z", "solo")})
