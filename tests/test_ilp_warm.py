"""Warm start across rounds (scheduler.ilp.warm): same LP, fewer simplex iterations, valid decisions."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from scheduler.bench.rounds import next_round_jobs
from scheduler.formats.profiles import load_goodput_model
from scheduler.ilp.build import build_problem
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.policy import PackingPolicy
from scheduler.ilp.pricing import price_pair_columns
from scheduler.ilp.solve import decision_from, solve_problem
from scheduler.ilp.warm import BASIC, LOWER, UPPER, WarmStart, _repair_count
from scheduler.model.cluster import Cluster, GpuType
from scheduler.model.colocation import ColocationTable
from scheduler.model.configs import configurations
from scheduler.model.goodput import TableGoodputModel
from scheduler.model.policy import RoundContext, check_decision


def instance(seed: int, num_jobs: int):
    rng = random.Random(seed)
    cluster = Cluster({"a": GpuType("a", 4, 4, 40), "b": GpuType("b", 6, 2, 16)})
    apps = [f"app{n}" for n in range(5)]
    table = {(app, c.gpu_type, c.num_gpus): rng.uniform(1, 10) * c.num_gpus ** rng.uniform(0.2, 0.9)
             for app in apps for c in configurations(cluster)}
    rows = []
    for t in cluster.type_names:
        for a, b in itertools.combinations_with_replacement(apps, 2):
            ra = rng.uniform(0.4, 0.95)
            rows.append((t, a, b, ra, ra if a == b else rng.uniform(0.4, 0.95)))
    from scheduler.model.jobs import Job

    jobs = [Job(f"j{n}", rng.choice(apps), adaptive=rng.random() < 0.6, num_gpus=rng.choice([1, 1, 2]),
                age_s=rng.uniform(0, 3600)) for n in range(num_jobs)]
    arrivals = iter([Job(f"new{n}", rng.choice(apps), adaptive=True) for n in range(10 * num_jobs)])
    return cluster, jobs, TableGoodputModel(table), ColocationTable.from_rows(rows), arrivals


def _priced(jobs, cluster, model, coloc, cfg, warm=None):
    problem = build_problem(jobs, cluster, model, coloc, cfg, warm=warm)
    price_pair_columns(problem, cfg, warm=warm)
    return problem


def _all_pairs_lp(jobs, cluster, model, coloc) -> float:
    import highspy

    from scheduler.ilp.solvers.highs import highs_lp

    problem = build_problem(jobs, cluster, model, coloc, IlpConfig(pair_candidates="all"))
    lp, _, _ = highs_lp(problem, minimise_form=True)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.passModel(lp)
    h.run()
    return h.getInfo().objective_function_value


@pytest.mark.parametrize("seed", range(3))
def test_warm_round_prices_to_an_lp_between_the_all_pairs_lp_and_the_cold_one(seed: int) -> None:
    """Running jobs make a pair's value depend on the pair (the move rule), so pricing by rank converges to
    the LP over the pairs it can find, a little above the all-pairs LP. Last round's groups, seeded, are
    such pairs: the warm round's LP lies between the all-pairs LP and the cold round's, in fewer iterations."""
    cluster, jobs, model, coloc, arrivals = instance(seed, 40)
    cfg = IlpConfig(top_k=2, pricing_passes=500, mip_gap=0.0)
    warm = WarmStart()
    first = _priced(jobs, cluster, model, coloc, cfg, warm)
    assert warm.rounds == 1 and warm.columns and not first.warm_started
    decision = decision_from(first, solve_problem(first, cfg))
    nxt = next_round_jobs(jobs, decision, random.Random(seed), 0.1, arrivals, 2)
    cold = _priced(nxt, cluster, model, coloc, cfg)
    hot = _priced(nxt, cluster, model, coloc, cfg, warm)
    assert hot.warm_started and not cold.warm_started
    assert _all_pairs_lp(nxt, cluster, model, coloc) - 1e-9 <= hot.lp_weight <= cold.lp_weight + 1e-9
    assert hot.lp_iterations < cold.lp_iterations


def test_a_round_solved_again_starts_from_its_optimal_basis() -> None:
    """The next round (every job keeps its allocation) needs fewer simplex iterations warm than cold, and
    the same round solved again starts from its own optimal basis: (almost) no iterations."""
    cluster, jobs, model, coloc, arrivals = instance(7, 150)
    cfg = IlpConfig(top_k=3, pricing_passes=500)  # to convergence: the final LP is optimal over all it can price
    warm = WarmStart()
    first = _priced(jobs, cluster, model, coloc, cfg, warm)
    decision = decision_from(first, solve_problem(first, cfg))
    nxt = next_round_jobs(jobs, decision, random.Random(0), 0.0, arrivals, 2)
    cold = _priced(nxt, cluster, model, coloc, cfg)
    hot = _priced(nxt, cluster, model, coloc, cfg, warm)
    assert cold.lp_iterations > 50
    assert hot.lp_iterations < cold.lp_iterations
    again = _priced(nxt, cluster, model, coloc, cfg, warm)
    assert again.warm_started and again.lp_iterations <= 5
    assert again.lp_weight == pytest.approx(hot.lp_weight, rel=1e-9)
    # the warm round seeds last round's groups instead of the graph's top-k: fewer group columns to build
    assert hot.num_groups < cold.num_groups


def test_policy_over_many_rounds_gives_valid_decisions_close_to_cold_ones() -> None:
    cluster, jobs, model, coloc, arrivals = instance(3, 60)
    warm_policy, cold_policy = PackingPolicy(), PackingPolicy(IlpConfig(warm_start=False))
    rng = random.Random(5)
    for index in range(2, 8):
        context = RoundContext(model, colocation=coloc)
        hot = warm_policy.allocate(jobs, cluster, context)
        cold = cold_policy.allocate(jobs, cluster, context)
        check_decision(hot, jobs, cluster)
        # p < 0: lower is better. A cold round prices new pairs by goodput before restarts and may miss that
        # keeping a running pair pays none (the group-change charge); the warm round seeds last round's groups
        assert hot.objective <= cold.objective * 1.01
        jobs = next_round_jobs(jobs, hot, rng, 0.1, arrivals, index)
    assert warm_policy.warm.rounds == 6
    assert cold_policy.warm.rounds == 0 and cold_policy.warm.empty


def test_a_policy_copy_starts_cold() -> None:
    cluster, jobs, model, coloc, _ = instance(1, 20)
    policy = PackingPolicy()
    policy.allocate(jobs, cluster, RoundContext(model, colocation=coloc))
    assert policy.warm.rounds == 1
    copy = policy.with_config(top_k=2)
    assert copy.warm is not policy.warm and copy.warm.rounds == 0


@pytest.mark.parametrize("cols, rows, num_rows", [
    ([BASIC, BASIC, LOWER], [BASIC, UPPER, UPPER, UPPER], 4),   # too few basic: slacks join
    ([BASIC, BASIC, BASIC, UPPER], [BASIC, BASIC], 2),          # too many: columns leave
    ([BASIC, LOWER], [BASIC, UPPER], 2),                        # already right
])
def test_repair_gives_exactly_one_basic_variable_per_row(cols, rows, num_rows) -> None:
    c, r = np.array(cols), np.array(rows)
    _repair_count(c, r, num_rows)
    assert int((c == BASIC).sum() + (r == BASIC).sum()) == num_rows
    assert not ((c == UPPER) & (np.array(cols) != UPPER)).any()  # nothing else changes status


@pytest.mark.sia_data
def test_scheduler_benchmark_reports_cold_and_warm_rounds_with_their_gaps(shared_data, tmp_path, monkeypatch) -> None:
    """`colocate bench scheduler --rounds 3` on a small case: one cold round, two warm ones, the last with a
    finite gap to a bound it cannot beat (the cold round's gap with --rounds 1); the pricing bound (used above 2,000 jobs) runs within
    IlpConfig's limits; the summary and the growth plot carry the warm rounds."""
    import scheduler.bench.scheduler as bench

    model = load_goodput_model(shared_data / "sia" / "traces")
    coloc, _ = bench.bench_colocation(None, bench.sia_cluster(64).type_names)
    monkeypatch.setattr(bench, "DENSE_BOUND_MAX_JOBS", 10)  # take the pricing bound's path
    rows = bench.run_case(64, 40, model, coloc, repeats=1, cfg=IlpConfig(), all_pairs_time_limit=30,
                          all_pairs_max_pairs=0, exact_time_limit=0, rounds=3, turnover=0.1)
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert rows[0]["exact_kind"] == "first sequence's last round only" and "warm_gap" not in rows[1]
    # the pricing LP prices by goodput before restarts, so a kept pair (no group-change charge) can rank below
    # new pairs and be left out: the warm round, which seeds last round's groups, may beat it by a little
    assert rows[2]["warm_reference_kind"] == "lp-bound (pricing)" and -0.005 <= rows[2]["warm_gap"] < 0.02
    cold = bench.run_case(64, 40, model, coloc, repeats=1, cfg=IlpConfig(), all_pairs_time_limit=30,
                          all_pairs_max_pairs=0, exact_time_limit=0, rounds=1)
    assert cold[0]["exact_kind"] == "lp-bound (pricing)" and -1e-9 <= cold[0]["topk_gap_vs_exact"] < 0.02
    summary = bench.summarize(rows)
    assert summary[0]["repeats"] == 1 and summary[0]["warm_rounds"] == 2
    bench.growth_plot(summary, tmp_path / "growth.png")
    assert (tmp_path / "growth.png").stat().st_size > 0
