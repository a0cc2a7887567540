"""Jobs of several owners and single-user MPS (scheduler/model/owners.py): a round never plans a group of several
owners on a GPU type whose sharing serves one user at a time unless time-slicing ratios exist for it (then it plans
with those), never on a type the rule closes (Slurm, one uid per batch job), and decides exactly as before when
every job has one owner. Hypothesis draws mixes of owners, applications, GPU counts and exclusive jobs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.ilp.config import IlpConfig
from scheduler.ilp.policy import PackingPolicy
from scheduler.model.cluster import Cluster, GpuType, cluster_from_dict
from scheduler.model.colocation import ColocationTable
from scheduler.model.goodput import TableGoodputModel
from scheduler.model.jobs import Job, JobRequirements
from scheduler.model.owners import NEVER, SAME, TIMESLICE, OwnerRule, OwnersTable, owner_rule, under_rule
from scheduler.model.policy import RoundContext, check_decision

APPS = ("x", "y", "z")
TYPES = ("single", "multi")
CLUSTER = Cluster({"single": GpuType("single", 1, 2, 32.0), "multi": GpuType("multi", 1, 2, 32.0, mps_multi_user=True)})
MODEL = TableGoodputModel({(app, t, n): rate * n for app, rate in zip(APPS, (100.0, 60.0, 40.0)) for t in TYPES
                           for n in (1, 2)})
MPS = ColocationTable.from_rows([(t, a, b, 0.85, 0.8) for t in TYPES for a in APPS for b in APPS])
SLICED = ColocationTable.from_rows([(t, a, b, 0.6, 0.6) for t in TYPES for a in APPS for b in APPS])

jobs_st = st.lists(st.tuples(st.sampled_from(APPS), st.sampled_from(("alice", "bob", "carol")), st.booleans(),
                             st.sampled_from((1, 1, 1, 2))), min_size=2, max_size=7)


def _jobs(drawn: list[tuple[str, str, bool, int]]) -> list[Job]:
    return [Job(f"j{i}", app, num_gpus=gpus, owner=owner,
                requirements=JobRequirements(exclusive=exclusive and i % 3 == 0))
            for i, (app, owner, exclusive, gpus) in enumerate(drawn)]


def _groups(decision: Any) -> list[tuple[str, tuple[str, ...]]]:
    return [(a.gpu_type, (a.job, *a.others)) for a in decision.allocations if a.others]


def _policy(size: int = 2) -> PackingPolicy:
    """Goodput summed (p = 1) over every candidate pair: packing pays whenever GPUs are short."""
    return PackingPolicy(IlpConfig(p=1.0, pair_candidates="all", max_group_size=size, mip_gap=0.0))


def _decide(jobs: list[Job], table: ColocationTable | None, size: int = 2, cluster: Cluster = CLUSTER) -> Any:
    decision = _policy(size).allocate(jobs, cluster, RoundContext(MODEL, colocation=table))
    check_decision(decision, jobs, cluster)
    return decision


RULE = owner_rule(CLUSTER, one_user_at_a_time=True)


def test_the_rule_of_a_cluster() -> None:
    assert RULE.across == {"single": TIMESLICE} and RULE.restricts
    assert owner_rule(CLUSTER, one_user_at_a_time=False).across == {}  # time-slicing mixes owners freely
    assert set(owner_rule(CLUSTER, one_user_at_a_time=False, one_uid_per_group=True).across.values()) == {NEVER}
    assert RULE.group_sharing("single", "mps", ["alice", "bob"])[0] == "timeslice"
    assert "one user at a time" in RULE.group_sharing("single", "mps", ["alice", "bob"])[1]
    assert RULE.group_sharing("single", "mps", ["alice", "alice"]) == ("mps", "")
    assert RULE.group_sharing("multi", "mps", ["alice", "bob"]) == ("mps", "")
    assert under_rule(MPS, OwnerRule({"single": SAME})) is MPS  # a rule that restricts nothing: the table itself


def test_the_cluster_file_says_which_mps_is_multi_user() -> None:
    from common.errors import InputError

    spec = {"gpu_types": {"t": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16, "mps_multi_user": True}}}
    assert cluster_from_dict(spec)["t"].mps_multi_user
    assert cluster_from_dict(cluster_from_dict(spec).to_dict()) == cluster_from_dict(spec)
    with pytest.raises(InputError, match="mps_multi_user"):
        cluster_from_dict({"gpu_types": {"t": {**spec["gpu_types"]["t"], "mps_multi_user": "yes"}}})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs_st, st.sampled_from((2, 3)))
def test_no_mps_group_spans_owners_without_time_slice_ratios(drawn: list, size: int) -> None:
    jobs = _jobs(drawn)
    owner = {j.name: j.owner for j in jobs}
    for gpu_type, members in _groups(_decide(jobs, under_rule(MPS, RULE), size)):
        if gpu_type == "single":
            assert len({owner[m] for m in members}) == 1, (gpu_type, members)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs_st)
def test_a_closed_rule_groups_no_two_owners_anywhere(drawn: list) -> None:
    jobs = _jobs(drawn)
    owner = {j.name: j.owner for j in jobs}
    rule = owner_rule(CLUSTER, one_user_at_a_time=True, one_uid_per_group=True)
    for _, members in _groups(_decide(jobs, under_rule(MPS, rule))):
        assert len({owner[m] for m in members}) == 1


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs_st, st.sampled_from(("", "alice")))
def test_one_owner_decides_exactly_as_before(drawn: list, one: str) -> None:
    jobs = [replace(j, owner=one) for j in _jobs(drawn)]
    before = _decide([replace(j, owner="") for j in jobs], MPS)
    after = _decide(jobs, under_rule(MPS, RULE, SLICED))
    assert sorted(map(repr, before.allocations)) == sorted(map(repr, after.allocations))


def test_several_owners_plan_with_the_time_slicing_ratios() -> None:
    alice, bob = Job("a", "x", owner="alice"), Job("b", "y", owner="bob")
    table = OwnersTable(MPS.ratios, inner=MPS, rule=RULE, timeslice=SLICED)
    assert table.lookup("single", alice, bob) == (0.6, 0.6)  # time-slicing's, not MPS's
    assert table.lookup("multi", alice, bob) == MPS.lookup("multi", alice, bob)  # multi-user MPS: MPS's
    assert table.lookup("single", alice, replace(bob, owner="alice")) == MPS.lookup("single", alice, bob)
    assert OwnersTable(MPS.ratios, inner=MPS, rule=RULE).lookup("single", alice, bob) is None
    assert table.triple_ratios("single", [alice, bob, Job("c", "z", owner="alice")]) == SLICED.triple_ratios(
        "single", [alice, bob, Job("c", "z")])


def test_two_owners_share_a_single_user_type_only_by_time_slicing() -> None:
    """Four one-GPU jobs of two owners on two GPUs of a single-user type: x beside y pays most, but each owner has
    two of one kind, so under the rule (no time-slicing ratios) only one-owner pairs are planned."""
    cluster = cluster_from_dict({"gpu_types": {"single": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 32}}})
    table = ColocationTable.from_rows([("single", "x", "y", 0.9, 0.9), ("single", "x", "x", 0.6, 0.6),
                                       ("single", "y", "y", 0.6, 0.6)])
    jobs = [Job("a1", "x", owner="alice"), Job("a2", "x", owner="alice"), Job("b1", "y", owner="bob"),
            Job("b2", "y", owner="bob")]
    rule = owner_rule(cluster, one_user_at_a_time=True)

    def pairs(table: ColocationTable | None) -> set[frozenset[str]]:
        return {frozenset(members) for _, members in _groups(_decide(jobs, table, cluster=cluster))}

    mixed = pairs(table)  # owners ignored: x beside y
    assert len(mixed) == 2 and all(len({m[0] for m in pair}) == 2 for pair in mixed)
    assert pairs(under_rule(table, rule)) == {frozenset(("a1", "a2")), frozenset(("b1", "b2"))}
