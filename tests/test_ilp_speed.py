"""Speed-ups of the round ILP that must not change its answers: the MIP solves without HiGHS's feasibility
jump and pricing's batched reduced costs."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import numpy as np
import pytest
from test_scheduler_ilp import random_instance

from scheduler.ilp.build import build_problem
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.objective import Objective
from scheduler.ilp.pricing import _pricing_plan, dual_ranked_partners
from scheduler.ilp.problem import RoundProblem
from scheduler.ilp.solvers.highs import _model
from scheduler.model.cluster import Cluster, GpuType
from scheduler.model.colocation import ColocationTable
from scheduler.model.configs import configurations
from scheduler.model.goodput import TableGoodputModel
from scheduler.model.jobs import Job, JobRequirements


def test_highs_runs_no_feasibility_jump_before_the_lp_rounding_start() -> None:
    """The MIPs start from the LP rounding's incumbent; HiGHS's feasibility jump, run before every root LP, cost
    three quarters of a small round's solve without improving a start (docs/scheduler.md)."""
    cluster, jobs, table, _, coloc = random_instance(3, 6)
    problem = build_problem(jobs, cluster, TableGoodputModel(table), coloc, IlpConfig())
    h, _ = _model(problem, IlpConfig())
    assert h.getOptionValue("mip_heuristic_run_feasibility_jump")[1] is False


def brute_force_costs(problem: RoundProblem, plan: list[tuple], cfg: IlpConfig, prices: tuple[np.ndarray, dict],
                      exclude: set | None) -> dict[tuple[int, int], float]:
    """The oracle, by definition rather than by the pricing's method: every pair of every plan entry (not only
    rank-aligned ones), its reduced cost ``w(ρ_i G_ic) − y_i + w(ρ_k G_kc) − y_k − n_c μ_t`` from the column's
    terms, memory checked, exclusions left out; the best (lowest) cost of each pair over the configurations."""
    y, mu = prices
    weight = Objective.of(cfg).member_weight
    mem = [j.requirements.memory_gb for j in problem.jobs]
    best: dict[tuple[int, int], float] = {}
    for a_key, b_key, ci, r, ia, ga, ib, gb in plan:
        c = problem.configs[ci]
        cap = problem.cluster[c.gpu_type].memory_gb
        g_of = {**dict(zip(ia.tolist(), ga.tolist())), **dict(zip(ib.tolist(), gb.tolist()))}
        if a_key == b_key:  # the lower index is the column's first member: ratio_a
            pairs = [(i, k, r[0], r[1]) for i, k in itertools.combinations(sorted(ia.tolist()), 2)]
        else:
            pairs = [(i, k, r[0], r[1]) for i in ia.tolist() for k in ib.tolist()]
        for i, k, ri, rk in pairs:
            key = (min(i, k), max(i, k))
            if exclude is not None and key in exclude:
                continue
            if mem[i] is not None and mem[k] is not None and mem[i] + mem[k] + 2 * cfg.context_memory_gb > cap:
                continue
            cost = (float(weight(np.array([g_of[i] * ri]))[0]) - y[i] + float(weight(np.array([g_of[k] * rk]))[0])
                    - y[k] - c.num_gpus * mu.get(c.gpu_type, 0.0))
            best[key] = min(cost, best.get(key, math.inf))
    return best


def pricing_instance(seed: int, memory: bool = True):
    """Jobs of few classes (so most plan entries hold several jobs, same-class entries included) on two GPU
    types; self-pairs with two different ratios; memory that rules some pairs out (``memory``)."""
    rng = random.Random(seed)
    cluster = Cluster({"a": GpuType("a", 2, 4, 40), "b": GpuType("b", 3, 2, 16)})
    apps = [f"app{n}" for n in range(3)]
    table = {(app, c.gpu_type, c.num_gpus): rng.uniform(1, 10) * c.num_gpus ** rng.uniform(0.2, 0.9)
             for app in apps for c in configurations(cluster)}
    rows = [(t, a, b, rng.uniform(0.4, 0.95), rng.uniform(0.4, 0.95))
            for t in cluster.type_names for a, b in itertools.combinations_with_replacement(apps, 2)]
    jobs = [Job(f"j{n}", rng.choice(apps), adaptive=rng.random() < 0.5, age_s=rng.uniform(0, 900),
                requirements=JobRequirements(rng.choice([None, 4.0, 12.0]) if memory else None), restarts=rng.randint(0, 2),
                current_gpu_type="a" if n % 3 == 0 else None, current_num_gpus=1 if n % 3 == 0 else 0)
            for n in range(rng.randint(2, 40))]
    return cluster, jobs, TableGoodputModel(table), ColocationTable.from_rows(rows), rng


@pytest.mark.parametrize("seed", range(40))
def test_pricing_returns_only_improving_pairs_and_always_the_best_one(seed: int) -> None:
    """Checked against the definition (brute force over all pairs), for random duals (ties included: duals drawn
    from a few values), exclusions and top-k: every pair returned improves the LP (negative reduced cost, fits in
    memory, not excluded); without exclusions or memory limits the most improving pair is among those returned
    (an empty answer proves the LP optimal); a larger top_k only adds pairs."""
    cluster, jobs, model, coloc, rng = pricing_instance(seed, memory=seed % 2 == 0)
    cfg = IlpConfig(top_k=rng.choice([1, 2, 3]), min_benefit=rng.choice([0.0, 0.05, 0.3]))
    problem = build_problem(jobs, cluster, model, coloc, cfg)
    data = problem.pricing
    assert data is not None and data.graph is not None
    plan = _pricing_plan(problem, data.options, problem.configs, coloc, data.graph, cfg)
    found_any = False
    for _ in range(4):
        levels = [0.0, -0.5, -1.0, -2.0, rng.uniform(-3, 0)]
        y = np.array([rng.choice(levels) for _ in jobs])
        mu = {t: rng.choice([0.0, -0.05, rng.uniform(-0.5, 0)]) for t in cluster.type_names}
        exclude = {pair for pair in itertools.combinations(range(len(jobs)), 2) if rng.random() < 0.1}
        for excl in (None, exclude):
            got = dual_ranked_partners(problem, data.options, problem.configs, coloc, data.graph, cfg, (y, mu), excl)
            costs = brute_force_costs(problem, plan, cfg, (y, mu), excl)
            assert all(costs.get(pair, 0.0) < -1e-9 for pair in got), [p for p in got if costs.get(p, 0) >= -1e-9]
            more = dual_ranked_partners(problem, data.options, problem.configs, coloc, data.graph,
                                        replace(cfg, top_k=cfg.top_k + 1), (y, mu), excl)
            assert got <= more
            best = min(costs.values(), default=0.0)
            if excl is None and seed % 2:  # no memory limits: the rank-aligned minimum is the global one
                assert (best < -1e-9) == bool(got)
                if got:
                    assert min(costs[p] for p in got) == pytest.approx(best, abs=1e-9)
            found_any |= bool(got)
    assert plan or not found_any
    if seed == 0:
        assert found_any and any(e[0] == e[1] for e in plan)  # the instance exercises both kinds of entry
