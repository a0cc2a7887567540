"""Speed-ups of the round ILP that must not change its answers: the MIP solves without HiGHS's feasibility
jump and pricing's batched reduced costs."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import numpy as np
import pytest
from test_scheduler_ilp import random_instance

from scheduler.ilp.build import build_problem
from scheduler.ilp.columns import JobColumns
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.objective import Objective
from scheduler.ilp.pricing import _pricing_plan, dual_ranked_partners
from scheduler.ilp.problem import RoundProblem
from scheduler.ilp.solvers.highs import _model
from scheduler.model.cluster import Cluster, GpuType
from scheduler.model.colocation import ColocationTable
from scheduler.model.configs import Configuration, configurations
from scheduler.model.goodput import TableGoodputModel
from scheduler.model.jobs import Job


def test_highs_runs_no_feasibility_jump_before_the_lp_rounding_start() -> None:
    """The MIPs start from the LP rounding's incumbent; HiGHS's feasibility jump, run before every root LP, cost
    three quarters of a small round's solve without improving a start (docs/scheduler.md)."""
    cluster, jobs, table, _, coloc = random_instance(3, 6)
    problem = build_problem(jobs, cluster, TableGoodputModel(table), coloc, IlpConfig())
    h, _ = _model(problem, IlpConfig())
    assert h.getOptionValue("mip_heuristic_run_feasibility_jump")[1] is False


def reference_partners(problem: RoundProblem, options: Sequence[JobColumns], configs: tuple[Configuration, ...],
                         colocation: "ColocationTable", graph: "object", cfg: IlpConfig,
                         prices: "tuple[np.ndarray, dict[str, float]]",
                         exclude: "set[tuple[int, ...]] | None" = None) -> set[tuple[int, int]]:
    """The per-entry loop pricing used before it was batched (commit e2d6fae), kept as the oracle."""
    y, mu = prices
    jobs = problem.jobs
    mem = [j.memory_gb for j in jobs]
    cap_mem = {t.name: t.memory_gb for t in problem.cluster}
    best: dict[int, list[tuple[float, int]]] = {}

    weight = Objective.of(cfg).member_weight
    for a_key, b_key, ci, r, ia, ga, ib, gb in _pricing_plan(problem, options, configs, colocation, graph, cfg):
        c = configs[ci]
        ia0, ga0 = ia, ga  # job ids ascending, as planned
        score_a = weight(ga * r[0]) - y[ia]
        score_b = weight(gb * r[1]) - y[ib]
        const = -c.num_gpus * mu.get(c.gpu_type, 0.0)
        ia, score_a = ia[np.argsort(score_a, kind="stable")], np.sort(score_a, kind="stable")
        ib, score_b = ib[np.argsort(score_b, kind="stable")], np.sort(score_b, kind="stable")
        if a_key == b_key:  # same class: pair neighbouring ranks (0,1), (1,2), (2,3), ...
            # a table may give the two copies of one job type different ratios (the column's first
            # member, the lower index, gets ratio_a): cost each pair with its real orientation
            left, right = ia[:-1], ia[1:]
            lo, hi = np.minimum(left, right), np.maximum(left, right)
            g_lo = ga0[np.searchsorted(ia0, lo)]
            g_hi = ga0[np.searchsorted(ia0, hi)]
            cost = weight(g_lo * r[0]) - y[lo] + weight(g_hi * r[1]) - y[hi] + const
            left, right = lo, hi
        else:  # rank r of A with ranks r and r+1 of B (two partners each, still nearly disjoint)
            m = min(len(ia), len(ib))
            left = np.concatenate([ia[:m], ia[:m - 1] if m > 1 else ia[:0]])
            right = np.concatenate([ib[:m], ib[1:m]])
            cost = np.concatenate([score_a[:m] + score_b[:m], score_a[:m - 1] + score_b[1:m]]) + const
        keep = cost < -1e-9
        for i, k, value in zip(left[keep], right[keep], cost[keep]):
            i, k = int(i), int(k)
            if exclude is not None and (min(i, k), max(i, k)) in exclude:
                continue  # already a candidate: do not let it use up one of the job's top-k slots
            mem_i, mem_k = mem[i], mem[k]
            if mem_i is not None and mem_k is not None:
                if mem_i + mem_k + 2 * cfg.context_memory_gb > cap_mem[c.gpu_type]:
                    continue
            best.setdefault(i, []).append((float(value), k))
            best.setdefault(k, []).append((float(value), i))
    pairs: set[tuple[int, int]] = set()
    for i, found in best.items():
        chosen: list[int] = []
        for _, k in sorted(found):
            if k not in chosen:
                chosen.append(k)
                if len(chosen) >= cfg.top_k:
                    break
        for k in chosen:
            pairs.add((min(i, k), max(i, k)))
    return pairs



def pricing_instance(seed: int):
    """Jobs of few classes (so most plan entries hold several jobs, same-class entries included) on two GPU
    types; self-pairs with two different ratios; memory that rules some pairs out."""
    rng = random.Random(seed)
    cluster = Cluster({"a": GpuType("a", 2, 4, 40), "b": GpuType("b", 3, 2, 16)})
    apps = [f"app{n}" for n in range(3)]
    table = {(app, c.gpu_type, c.num_gpus): rng.uniform(1, 10) * c.num_gpus ** rng.uniform(0.2, 0.9)
             for app in apps for c in configurations(cluster)}
    rows = [(t, a, b, rng.uniform(0.4, 0.95), rng.uniform(0.4, 0.95))
            for t in cluster.type_names for a, b in itertools.combinations_with_replacement(apps, 2)]
    jobs = [Job(f"j{n}", rng.choice(apps), adaptive=rng.random() < 0.5, age_s=rng.uniform(0, 900),
                memory_gb=rng.choice([None, 4.0, 12.0]), restarts=rng.randint(0, 2),
                current_gpu_type="a" if n % 3 == 0 else None, current_num_gpus=1 if n % 3 == 0 else 0)
            for n in range(rng.randint(2, 40))]
    return cluster, jobs, TableGoodputModel(table), ColocationTable.from_rows(rows), rng


@pytest.mark.parametrize("seed", range(40))
def test_batched_pricing_equals_the_per_entry_loop(seed: int) -> None:
    """Same pairs for random duals (ties included: duals drawn from a few values), exclusions and top-k."""
    cluster, jobs, model, coloc, rng = pricing_instance(seed)
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
            want = reference_partners(problem, data.options, problem.configs, coloc, data.graph, cfg, (y, mu), excl)
            assert got == want
            found_any |= bool(want)
    assert plan or not found_any
    if seed == 0:
        assert found_any and any(e[0] == e[1] for e in plan)  # the instance exercises both kinds of entry
