"""The slowdown bound of a shared GPU: the round ILP offers no group a member's bound rules out (cluster-wide
``max_slowdown``, a job's own, ``exclusive``, what the server measured), and the simulator reports how slow
jobs really ran in groups against their bounds (``worst_slowdown``, ``over_bound_fraction``)."""

from __future__ import annotations

import pytest

from scheduler.formats.workload_jobs import Workload, WorkloadJob
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.policy import PackingPolicy
from scheduler.model.cluster import cluster_from_dict
from scheduler.model.colocation import BoundedTable, ColocationTable, MeasuredTable
from scheduler.model.goodput import TableGoodputModel
from scheduler.model.jobs import Job, JobRequirements
from scheduler.model.policy import RoundContext, check_decision
from scheduler.sim.config import SimConfig
from scheduler.sim.simulator import simulate

ONE_GPU = cluster_from_dict({"gpu_types": {"g": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 80}}})
GOODPUT = TableGoodputModel({(app, "g", 1): 10.0 for app in ("light", "heavy", "other")})
# light beside heavy: light at 0.3 of its speed (slowdown 3.3), heavy at 0.9 (Σ 1.2: the pair pays)
TABLE = ColocationTable.from_rows([("g", "light", "heavy", 0.3, 0.9), ("g", "light", "other", 0.6, 0.6)])
NO_COSTS = SimConfig(round_s=60.0, restart_cost_s={}, default_restart_cost_s=0.0, slowdown={})


def _partners(policy: PackingPolicy, jobs: list[Job], table: ColocationTable = TABLE) -> dict[str, str | None]:
    decision = policy.allocate(jobs, ONE_GPU, RoundContext(GOODPUT, colocation=table))
    check_decision(decision, jobs, ONE_GPU)
    return {a.job: a.partner for a in decision.allocations}


def _policy(**changes: object) -> PackingPolicy:
    return PackingPolicy(IlpConfig(p=1.0, min_benefit=0.0, **changes))  # type: ignore[arg-type]


def test_the_default_bound_keeps_a_member_from_running_below_one_in_two_and_a_half() -> None:
    jobs = [Job("l", "light"), Job("h", "heavy")]
    assert _policy().config.max_slowdown == 2.5
    assert _partners(_policy(), jobs) == {"l": None} or _partners(_policy(), jobs) == {"h": None}  # one runs
    assert _partners(_policy(max_slowdown=None), jobs) == {"l": "h", "h": "l"}  # no bound: 1.2 > 1 pays
    assert _partners(_policy(max_slowdown=3.5), jobs) == {"l": "h", "h": "l"}  # 1/0.3 = 3.33 <= 3.5


def test_a_jobs_own_bound_overrides_the_cluster_wide_one_either_way() -> None:
    tolerant = [Job("l", "light", requirements=JobRequirements(max_slowdown=4.0)), Job("h", "heavy")]
    assert _partners(_policy(), tolerant) == {"l": "h", "h": "l"}  # its own 4.0 accepts 3.3
    strict = [Job("l", "light", requirements=JobRequirements(max_slowdown=1.25)), Job("o", "other")]
    assert _partners(_policy(max_slowdown=None), strict) in ({"l": None}, {"o": None})  # 0.6 < 1/1.25
    assert _partners(_policy(max_slowdown=None), [Job("l", "light"), Job("o", "other")]) == {"l": "o", "o": "l"}


def test_an_exclusive_job_never_shares_its_gpus() -> None:
    jobs = [Job("l", "light", requirements=JobRequirements(exclusive=True)), Job("o", "other")]
    assert _partners(_policy(max_slowdown=None), jobs) in ({"l": None}, {"o": None})
    bounded = BoundedTable(TABLE.ratios, inner=TABLE, default_bound=None)
    assert bounded.lookup("g", jobs[0], jobs[1]) is None and bounded.lookup("g", jobs[1], jobs[0]) is None


def test_a_measured_ratio_keeps_a_pair_out_whatever_the_belief_says() -> None:
    """The live server's measurement of a running pair (MeasuredTable) counts as well as the belief: a pair
    measured to break a member's bound is not planned again even while the shrunk belief still allows it."""
    jobs = [Job("l", "light"), Job("o", "other")]
    measured = MeasuredTable(TABLE.ratios, inner=TABLE, measured={("g", "light", "other"): 0.35,
                                                                   ("g", "other", "light"): 0.7})
    assert _partners(_policy(), jobs) == {"l": "o", "o": "l"}  # the belief: 0.6 each
    assert _partners(_policy(), jobs, measured) in ({"l": None}, {"o": None})  # measured 0.35 < 1/2.5
    assert _partners(_policy(max_slowdown=3.0), jobs, measured) == {"l": "o", "o": "l"}


def test_a_held_pair_keeps_its_column_while_it_is_held() -> None:
    """A pair running now with a pinned member cannot move this round: the bound does not make it infeasible
    (serve releases the members of a group that breaks a bound; the simulator pins jobs while they restore)."""
    jobs = [Job("l", "light", current_gpu_type="g", current_num_gpus=1, current_partner="h", pinned=True, age_s=60),
            Job("h", "heavy", current_gpu_type="g", current_num_gpus=1, current_partner="l", pinned=True, age_s=60)]
    bounded = BoundedTable(TABLE.ratios, inner=TABLE, default_bound=2.5)
    assert bounded.lookup("g", jobs[0], jobs[1]) == (0.3, 0.9)
    released = [j.with_state(pinned=False) for j in jobs]
    assert bounded.lookup("g", released[0], released[1]) is None
    decision = _policy().allocate(jobs, ONE_GPU, RoundContext(GOODPUT, colocation=TABLE))
    assert decision.solver.fallback is None and {a.job: a.partner for a in decision.allocations} == {"l": "h", "h": "l"}


def test_colocate_triples_bounds_at_one_and_a_quarter_of_an_even_third() -> None:
    from scheduler.policies import TRIPLE_MAX_SLOWDOWN, make_policy, own_ilp

    assert make_policy("colocate-triples").traits.max_slowdown == TRIPLE_MAX_SLOWDOWN == 3.75
    assert make_policy("colocate").traits.max_slowdown == 2.5 and make_policy("sia").traits.max_slowdown is None
    assert make_policy("colocate-triples", ilp=own_ilp("colocate-triples", max_slowdown=None)).traits.max_slowdown is None


def _two_jobs(**fields: object) -> Workload:
    return Workload("two", (WorkloadJob("L", "light", 0.0, 1, 32, work=6000.0, **fields),  # type: ignore[arg-type]
                            WorkloadJob("H", "heavy", 0.0, 1, 32, work=6000.0)))


def test_the_simulator_reports_the_worst_slowdown_and_the_time_above_each_bound() -> None:
    unbounded = simulate(ONE_GPU, _two_jobs(), _policy(max_slowdown=None), colocation=TABLE, profiles=GOODPUT,
                         config=NO_COSTS)
    jobs = unbounded.jobs.set_index("job")
    assert jobs.loc["L", "worst_slowdown"] == pytest.approx(1 / 0.3) and jobs.loc["H", "worst_slowdown"] == pytest.approx(1 / 0.9)
    # measured against the cluster-wide default 2.5 (a policy that keeps no bound): L's packed time is all above
    assert jobs.loc["L", "slowdown_bound"] == 2.5 and jobs.loc["L", "over_bound_s"] == pytest.approx(jobs.loc["L", "packed_s"])
    s = unbounded.summary
    assert s["worst_slowdown"] == pytest.approx(1 / 0.3)
    assert s["over_bound_fraction"] == pytest.approx(jobs["packed_s"]["L"] / jobs["run_s"].sum()) and s["over_bound_fraction"] > 0
    bounded = simulate(ONE_GPU, _two_jobs(), _policy(), colocation=TABLE, profiles=GOODPUT, config=NO_COSTS)
    assert bounded.summary["worst_slowdown"] == 1.0 and bounded.summary["over_bound_fraction"] == 0.0
    assert bounded.summary["packed_fraction"] == 0.0 and bounded.meta["slowdown_bound"] == 2.5
    own = simulate(ONE_GPU, _two_jobs(requirements=JobRequirements(max_slowdown=4.0)), _policy(), colocation=TABLE, profiles=GOODPUT, config=NO_COSTS)
    assert own.summary["packed_fraction"] > 0 and own.summary["over_bound_fraction"] == 0.0  # its own 4.0 holds


def test_a_wrong_belief_shows_as_time_above_the_bound() -> None:
    """The policy plans with a belief that says light + heavy is harmless (0.6 / 0.9); the truth slows light
    3.3x: the bound holds under the belief, the simulator measures it broken until the belief learns."""
    belief_table = ColocationTable.from_rows([("g", "light", "heavy", 0.6, 0.9)])
    result = simulate(ONE_GPU, _two_jobs(), _policy(), colocation=TABLE, profiles=GOODPUT,
                      config=_with_belief(NO_COSTS, belief_table))
    assert result.meta["belief"]["observations"] > 0  # it ran the pair and learned from it
    assert result.summary["over_bound_fraction"] > 0 and result.summary["worst_slowdown"] == pytest.approx(1 / 0.3)


def _with_belief(config: SimConfig, table: ColocationTable) -> SimConfig:
    import dataclasses
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp())
    path = folder / "belief.csv"
    rows = ["gpu_type,type_a,type_b,ratio_a,ratio_b"]
    rows += [f"{g},{a},{b},{ra},{rb}" for (g, a, b), (ra, rb) in table.ratios.items() if a <= b]
    path.write_text("\n".join(rows) + "\n")
    return dataclasses.replace(config, belief=f"table:{path}")
