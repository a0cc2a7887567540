"""Groups of three in the simulator: the ILP's triples run, progress integrates with the group's ratios and then
the surviving pair's, memory for three is enforced, and the per-round invariants cover groups of three."""

from __future__ import annotations

import pytest

from scheduler.formats.workload_jobs import Workload, WorkloadJob
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.policy import PackingPolicy
from scheduler.model.cluster import cluster_from_dict
from scheduler.model.colocation import TRIPLE_RATIOS, ColocationTable
from scheduler.model.goodput import TableGoodputModel
from scheduler.model.jobs import Job
from scheduler.model.policy import Allocation, JobPlacement, Placement, PolicyTraits, RoundDecision, SolverInfo
from scheduler.policies import make_policy, own_ilp
from scheduler.policies.common import make_decision
from scheduler.sim.checks import SimulationError, check_group_memory, check_placement, check_round
from scheduler.sim.config import SimConfig
from scheduler.sim.job_model import MemoryCheckedTable, MemoryModel
from scheduler.sim.simulator import Simulator, _Run, simulate

NO_COSTS = SimConfig(round_s=60.0, restart_cost_s={}, default_restart_cost_s=0.0, slowdown={})
PAIRS = {("a", "b"): (0.8, 0.7), ("a", "c"): (0.9, 0.6), ("b", "c"): (0.75, 0.8)}
TABLE = ColocationTable.from_rows([("g", x, y, rx, ry) for (x, y), (rx, ry) in PAIRS.items()])
GOODPUT = TableGoodputModel({(app, "g", 1): 10.0 for app in "abc"})
WORK = {"A": 600.0, "B": 900.0, "C": 1200.0}


def one_gpu(memory_gb: float = 16.0):
    return cluster_from_dict({"gpu_types": {"g": {"nodes": 1, "gpus_per_node": 1, "memory_gb": memory_gb}}})


def three_jobs(batch: int = 32) -> Workload:
    return Workload("three", tuple(WorkloadJob(n, n.lower(), 0.0, 1, batch, work=WORK[n]) for n in "ABC"))


def triple_ratio(me: str, others: str) -> float:
    """Additive slowdowns, written out independently of the code under test."""
    slow = 1.0
    for o in others:
        r = PAIRS.get((me, o), PAIRS.get((o, me), (0, 0))[::-1])[0]
        slow += 1 / r - 1
    return 1 / slow


def triples_policy() -> PackingPolicy:
    return PackingPolicy(IlpConfig(p=1.0, min_benefit=0.0, max_group_size=3), name="colocate-triples")


def test_shared_prediction_is_additive_slowdowns():
    jobs = [Job(n, n.lower()) for n in "ABC"]
    got = TABLE.group_ratios("g", jobs)
    assert got == pytest.approx((triple_ratio("a", "bc"), triple_ratio("b", "ac"), triple_ratio("c", "ab")))
    assert TABLE.group_ratios("g", jobs[:2]) == (0.8, 0.7) and TABLE.group_ratios("g", jobs[:1]) == (1.0,)
    half = ColocationTable.from_rows([("g", "a", "a", 0.5, 0.5)])
    assert half.triple_ratios("g", [Job(n, "a") for n in "xyz"]) == pytest.approx((1 / 3,) * 3)
    assert ColocationTable.from_rows([("g", "a", "b", 0.8, 0.7)]).triple_ratios("g", jobs) is None  # a pair unknown


def test_triple_runs_then_the_survivors_run_at_their_pair_ratio():
    result = simulate(one_gpu(), three_jobs(), triples_policy(), colocation=TABLE, profiles=GOODPUT, config=NO_COSTS)
    alloc = result.allocations
    first = alloc[alloc["round"] == 0].set_index("job")
    assert (first["group_size"] == 3).all() and first["gpus"].nunique() == 1 and first["nodes"].nunique() == 1
    assert sorted(first.loc["A", "partner"].split(",")) == ["B", "C"]
    # round 0, all three present for 60 s: progress = 60 s x 10/s x own triple ratio
    ra, rb, rc = triple_ratio("a", "bc"), triple_ratio("b", "ac"), triple_ratio("c", "ab")
    for name, r in (("A", ra), ("B", rb), ("C", rc)):
        assert first.loc[name, "progress"] == pytest.approx(60 * 10 * r / WORK[name])
        assert first.loc[name, "packed_rate"] == pytest.approx(10 * r)
    # A finishes inside round 1; B and C go on as a pair at (0.75, 0.8), then C alone at 10/s
    t1 = WORK["A"] / (10 * ra)
    left_b, left_c = WORK["B"] - 10 * rb * t1, WORK["C"] - 10 * rc * t1
    t2 = t1 + left_b / (10 * 0.75)
    t3 = t2 + (left_c - 10 * 0.8 * (t2 - t1)) / 10
    jct = dict(zip(result.jobs["job"], result.jobs["jct_s"]))
    assert jct == pytest.approx({"A": t1, "B": t2, "C": t3}, abs=1e-6)
    s = result.summary
    assert s["triple_fraction"] == pytest.approx(t1 / t3) and s["packed_fraction"] == pytest.approx(t2 / t3)
    assert s["gpu_hours"] == pytest.approx(t3 / 3600) == pytest.approx(result.jobs["gpu_hours"].sum())
    assert result.jobs.set_index("job").loc["A", "gpu_hours"] == pytest.approx(t1 / 3 / 3600)
    assert s["restarts"] == 0  # B and C stay on their GPU when A leaves
    rounds = result.rounds.set_index("round")
    assert rounds.loc[0, "triple_jobs"] == 3 and rounds.loc[0, "triple_gpu_s"] == pytest.approx(60.0)
    assert result.meta["triple_ratios"] == TRIPLE_RATIOS and result.meta["max_group_size"] == 3


def test_pairs_only_policy_never_forms_a_triple():
    result = simulate(one_gpu(), three_jobs(), PackingPolicy(IlpConfig(p=1.0, min_benefit=0.0), name="colocate"),
                      colocation=TABLE, profiles=GOODPUT, config=NO_COSTS)
    assert result.allocations["group_size"].max() == 2 and result.summary["triple_fraction"] == 0.0
    assert result.meta["triple_ratios"] == "none (pairs only)"


def test_registered_policy_packs_triples():
    policy = make_policy("colocate-triples", ilp=own_ilp("colocate-triples", p=1.0, min_benefit=0.0))
    assert policy.config.max_group_size == 3 and policy.name == "colocate-triples"
    result = simulate(one_gpu(), three_jobs(), "colocate-triples", colocation=TABLE, profiles=GOODPUT,
                      config=NO_COSTS, adaptive=False, ilp=own_ilp("colocate-triples", p=1.0, min_benefit=0.0))
    assert result.summary["triple_fraction"] > 0


# ------------------------------------------------------------------ memory for three

class LimitedGoodput(TableGoodputModel):
    """Local batches 1-32 on every GPU type: the memory model fills a GPU at 32 (MemoryModel)."""

    def local_batch_range(self, application: str, gpu_type: str) -> tuple[float, float]:
        return 1.0, 32.0


LIMITED = LimitedGoodput(GOODPUT.table)


def test_memory_for_three_is_checked_by_the_table_and_the_model():
    memory = MemoryModel(LIMITED, one_gpu())
    # 15.5 GB / 32 per sample, 10 % headroom each (the one memory rule, scheduler.model.memory): three at 8 fit
    # (12.8 + 1.5 GB), three at 12 do not (19.2 + 1.5); pairs at 12 do (12.8 + 1)
    assert memory.group_fits("g", ("a", 8), ("b", 8), ("c", 8))
    assert not memory.group_fits("g", ("a", 12), ("b", 12), ("c", 12))
    assert memory.group_fits("g", ("a", 12), ("b", 12))
    shrunk = memory.group_locals("g", ("a", 12), ("b", 12), ("c", 12))
    assert memory.group_fits("g", *zip("abc", shrunk)) and all(x < 12 for x in shrunk)
    # proportional shrinking would take the small member below the smallest batch it runs: it stays there
    # ((16 - 1.5) / 1.1 = 13.2 GB for the three, 1.9 of it c's at 4: a and b get 11 each)
    assert memory.group_locals("g", ("a", 32), ("b", 32), ("c", 4), floors=(1, 1, 4)) == (11, 11, 4)
    table = MemoryCheckedTable(TABLE.ratios, memory)
    big = [Job(n, n.lower(), num_gpus=1, batch_size=12) for n in "ABC"]
    small = [j.with_state(batch_size=8) for j in big]
    assert table.triple_ratios("g", big) is None and table.lookup("g", big[0], big[1]) == (0.8, 0.7)
    assert table.triple_ratios("g", small) == pytest.approx(TABLE.triple_ratios("g", small))
    with pytest.raises(SimulationError, match=r"job x: packed with y and z on g .* 3 x 0.5 GB context"):
        check_group_memory(2, 120.0, "g", [("x", "a", 12), ("y", "b", 12), ("z", "c", 12)], memory)


@pytest.mark.parametrize("batch, triples", [(8, True), (12, False)])
def test_a_triple_that_does_not_fit_is_never_placed(batch, triples):
    result = simulate(one_gpu(), three_jobs(batch), triples_policy(), colocation=TABLE, profiles=LIMITED,
                      config=NO_COSTS, adaptive=False)
    assert result.summary["completed"] == 3
    assert (result.summary["triple_fraction"] > 0) is triples
    assert bool(result.allocations["group_size"].max() == 3) is triples


class ForcedTriple:
    """Packs all three jobs on the one GPU whatever the table says."""

    name, traits = "forced", PolicyTraits(max_group_size=3)

    def allocate(self, jobs, cluster, context):
        names = [j.name for j in jobs]
        allocs = [Allocation(n, "g", 1, 12, partners=tuple(m for m in names if m != n)) for n in names]
        return make_decision(jobs, allocs, "forced", 0.0)


def test_a_forced_triple_that_does_not_fit_stops_the_run():
    with pytest.raises(SimulationError, match=r"round 0 .*job A: packed with B and C .*does not fit in memory"):
        simulate(one_gpu(), three_jobs(12), ForcedTriple(), colocation=TABLE, profiles=LIMITED, config=NO_COSTS)


# ------------------------------------------------------------------ invariants and restarts

def _decision(*allocs: Allocation) -> RoundDecision:
    return RoundDecision(tuple(allocs), (), 0.0, SolverInfo("test", "ok", 0.0, 0.0))


def _group(names: str, gpu_type: str = "g", gpus: int = 1) -> list[Allocation]:
    return [Allocation(n, gpu_type, gpus, 32, partners=tuple(m for m in names if m != n)) for n in names]


def test_check_round_covers_groups_of_three():
    cluster = cluster_from_dict({"gpu_types": {"g": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}}})
    jobs = [Job(n, "a") for n in "ABCD"]
    check_round(0, 0.0, _decision(*_group("ABC"), Allocation("D", "g", 1, 32)), jobs, cluster, set())
    odd = _group("ABC")
    odd[2] = Allocation("C", "g", 1, 32, partners=("A", "D"))
    with pytest.raises(SimulationError, match="job A: group member C does not name the same group"):
        check_round(0, 0.0, _decision(*odd, Allocation("D", "g", 1, 32)), jobs, cluster, set())
    shapes = _group("ABC")
    shapes[1] = Allocation("B", "g", 2, 32, partners=("A", "C"))
    with pytest.raises(SimulationError, match="group configurations differ"):
        check_round(0, 0.0, _decision(*shapes, Allocation("D", "g", 1, 32)), jobs, cluster, set())
    with pytest.raises(SimulationError, match="at most 3 distinct jobs"):
        check_round(0, 0.0, _decision(*_group("ABCD")), jobs, cluster, set())


def test_check_placement_covers_groups_of_three():
    decision = _decision(*_group("ABC"), Allocation("D", "g", 1, 32))
    at = {n: JobPlacement(n, "g", (0,), (0,)) for n in "ABC"}
    check_placement(0, 0.0, decision, Placement({**at, "D": JobPlacement("D", "g", (0,), (1,))}))
    with pytest.raises(SimulationError, match="GPU .* shared by 4 jobs"):
        check_placement(0, 0.0, decision, Placement({**at, "D": JobPlacement("D", "g", (0,), (0,))}))
    apart = {**at, "C": JobPlacement("C", "g", (0,), (1,)), "D": JobPlacement("D", "g", (0,), (2,))}
    with pytest.raises(SimulationError, match="job A: group with C is not on the same GPUs"):
        check_placement(0, 0.0, decision, Placement(apart))
    pair = _decision(*_group("AB"), Allocation("C", "g", 1, 32))
    with pytest.raises(SimulationError, match="shares GPU .* which is not its partner"):
        check_placement(0, 0.0, pair, Placement({n: JobPlacement(n, "g", (0,), (0,)) for n in "ABC"}))


def test_joining_or_leaving_a_group_restarts_under_the_pair_rule():
    """A and B share GPU 0, C runs alone on GPU 1; then C joins them on GPU 0 (C restarts, A and B stay);
    then A leaves for GPU 1 (A restarts, B and C stay)."""
    cluster = cluster_from_dict({"gpu_types": {"g": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}}})
    work = Workload("w", tuple(WorkloadJob(n, "a", 0.0, 1, 32, work=1e6) for n in "ABC"))
    sim = Simulator(cluster, work, ForcedTriple(), TableGoodputModel({("a", "g", 1): 1.0}), TABLE, NO_COSTS)
    run = _Run(pending=list(sim.states.values()))
    sim._arrivals(run)
    jobs = [Job(n, "a") for n in "ABC"]

    def step(groups: dict[str, tuple[str, int]]) -> dict[str, int]:
        allocs = [Allocation(n, "g", 1, 32, partners=tuple(m for m in members if m != n))
                  for n, (members, _) in groups.items()]
        allocs = [a if len(a.partners) != 1 else Allocation(a.job, "g", 1, 32, partner=a.partners[0]) for a in allocs]
        placement = Placement({n: JobPlacement(n, "g", (0,), (gpu,)) for n, (_, gpu) in groups.items()})
        sim._apply(run, make_decision(jobs, allocs, "scripted", 0.0), placement)
        return {n: st.restarts for n, st in run.active.items()}

    assert step({"A": ("AB", 0), "B": ("AB", 0), "C": ("C", 1)}) == {"A": 0, "B": 0, "C": 0}
    assert step({"A": ("ABC", 0), "B": ("ABC", 0), "C": ("ABC", 0)}) == {"A": 0, "B": 0, "C": 1}
    assert step({"A": ("A", 1), "B": ("BC", 0), "C": ("BC", 0)}) == {"A": 1, "B": 0, "C": 1}
