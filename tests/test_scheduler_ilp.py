"""The round ILP against independent oracles: brute force, networkx matching, and a direct Sia formulation."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import networkx as nx
import pytest

from scheduler.ilp.build import build_problem
from scheduler.ilp.columns import pair_move_values, restart_factor
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.policy import PackingPolicy
from scheduler.ilp.solvers.rounding import greedy_selection
from scheduler.model.cluster import Cluster, GpuType
from scheduler.model.colocation import ColocationTable
from scheduler.model.configs import configurations
from scheduler.model.goodput import TableGoodputModel
from scheduler.model.jobs import Job, JobRequirements
from scheduler.model.placement import place
from scheduler.model.policy import RoundContext, check_decision

CONTEXT_GB = 0.5


def tiny_cluster() -> Cluster:
    return Cluster({
        "big": GpuType("big", nodes=1, gpus_per_node=4, memory_gb=16),
        "small": GpuType("small", nodes=1, gpus_per_node=2, memory_gb=8),
    })


def random_instance(seed: int, num_jobs: int):
    """Jobs, a goodput table, a ratio dict (oracle) and the same ratios as a ColocationTable."""
    rng = random.Random(seed)
    cluster = tiny_cluster()
    apps = [f"app{n}" for n in range(num_jobs)]
    table: dict[tuple[str, str, int], float] = {}
    for app in apps:
        for t in cluster:
            if rng.random() < 0.15:
                continue  # application not profiled on this type
            base = rng.uniform(10, 100)
            for c in configurations(cluster):
                if c.gpu_type == t.name:
                    table[(app, t.name, c.num_gpus)] = base * c.num_gpus ** rng.uniform(0.3, 1.0)
    ratios: dict[tuple[str, str, str], tuple[float, float]] = {}
    rows = []
    for t in cluster:
        for a, b in itertools.combinations_with_replacement(apps, 2):
            if rng.random() < 0.3:
                continue  # never measured
            ra, rb = (0.0, 0.0) if rng.random() < 0.1 else (rng.uniform(0.35, 0.95), rng.uniform(0.35, 0.95))
            rows.append((t.name, a, b, ra, rb))
            ratios[(t.name, a, b)] = (ra, rb)
            ratios[(t.name, b, a)] = (rb, ra)
    jobs = []
    for n, app in enumerate(apps):
        adaptive = rng.random() < 0.5
        running = rng.random() < 0.4
        cur_type = rng.choice(cluster.type_names) if running else None
        fields = dict(  # drawn in this order: the seeds' instances stay as they were
            name=f"j{n}", application=app, adaptive=adaptive,
            num_gpus=1 if adaptive else rng.choice([1, 1, 2]),
            memory_gb=rng.choice([None, 2.0, 5.0, 9.0]),
            age_s=rng.uniform(0, 600), restarts=rng.randint(0, 3),
            current_gpu_type=cur_type, current_num_gpus=rng.choice([1, 2]) if running else 0,
            max_slowdown=rng.choice([None, None, 1.6, 2.0, 3.0]), exclusive=rng.random() < 0.1,
        )
        needs = JobRequirements(*(fields.pop(k) for k in ("memory_gb", "max_slowdown", "exclusive")))
        jobs.append(Job(**fields, requirements=needs))  # type: ignore[arg-type]
    return cluster, jobs, table, ratios, ColocationTable.from_rows(rows)


HEADROOM = 0.1  # the stated memory headroom of a group member (scheduler.model.memory)


def oracle_memory_fits(members: list[Job], gpu_memory_gb: float) -> bool:
    """The memory rule written out: footprints (unknown ones as 0) plus 10 % each, plus a context per job."""
    return sum((j.requirements.memory_gb or 0.0) * (1 + HEADROOM) + CONTEXT_GB for j in members) <= gpu_memory_gb + 1e-9


def oracle_bounds_hold(members: list[Job], ratios: list[float], cfg: IlpConfig) -> bool:
    """No exclusive member; each member's ratio at least 1 / its bound (its own, else the config's)."""
    for job, r in zip(members, ratios):
        own = job.requirements.max_slowdown
        bound = own if own is not None else cfg.max_slowdown
        if job.requirements.exclusive or (bound is not None and r < 1 / bound - 1e-12):
            return False
    return True


def oracle_pair_move(a: Job, b: Job, c, va: float, vb: float, cfg: IlpConfig) -> tuple[float, float]:
    """The group-change rule written out independently: unless the two already run as partners, each one
    running now on c's type and size is restarted by the change and pays its restart factor."""
    together = a.current_partner == b.name and b.current_partner == a.name
    a_here = a.current_gpu_type == c.gpu_type and a.current_num_gpus == c.num_gpus
    b_here = b.current_gpu_type == c.gpu_type and b.current_num_gpus == c.num_gpus
    if together:
        return va, vb
    return (va * restart_factor(a, cfg.restart_cost_s) if a_here else va,
            vb * restart_factor(b, cfg.restart_cost_s) if b_here else vb)


def oracle_alone(job: Job, c, v: float, cfg: IlpConfig) -> float:
    """A member of a running group alone on its current shape: the split restarts it (at least resume_floor)."""
    if job.current_partner is not None and (job.current_gpu_type, job.current_num_gpus) == (c.gpu_type, c.num_gpus):
        return v * max(restart_factor(job, cfg.restart_cost_s), cfg.resume_floor)
    return v


def brute_force(cluster: Cluster, jobs: list[Job], table, ratios, cfg: IlpConfig) -> float:
    """Enumerate every assignment (alone, paired, unallocated) and return the best objective."""
    configs = configurations(cluster)
    mem = {t.name: t.memory_gb for t in cluster}
    options: list[dict] = []
    for job in jobs:
        raw = {}
        for c in configs:
            if not job.adaptive and c.num_gpus != job.num_gpus:
                continue
            if job.requirements.memory_gb is not None and job.requirements.memory_gb > mem[c.gpu_type]:
                continue
            g = table.get((job.application, c.gpu_type, c.num_gpus))
            if g:
                raw[c] = g
        norm = {}
        if raw:
            base = min(raw.values())
            factor = restart_factor(job, cfg.restart_cost_s)
            for c, g in raw.items():
                value = g / base
                if job.is_running and (c.gpu_type, c.num_gpus) != (job.current_gpu_type, job.current_num_gpus):
                    value *= factor
                if value > 0:
                    norm[c] = value
        options.append(norm)

    def score(values: list[float]) -> float:
        return sum(v ** cfg.p for v in values)

    best = math.inf if cfg.p < 0 else -math.inf
    n = len(jobs)

    def recurse(i: int, assigned: dict[int, tuple], used: dict[str, int], values: list[float]) -> None:
        nonlocal best
        if i == n:
            unalloc = n - len(values)
            obj = score(values) + (cfg.lambda_unallocated * unalloc if cfg.p < 0 else 0.0)
            best = min(best, obj) if cfg.p < 0 else max(best, obj)
            return
        if i in assigned:
            recurse(i + 1, assigned, used, values)
            return
        recurse(i + 1, assigned, used, values)  # unallocated
        for c, v in options[i].items():
            if used[c.gpu_type] + c.num_gpus <= cluster.capacity(c.gpu_type):
                used[c.gpu_type] += c.num_gpus
                recurse(i + 1, assigned, used, values + [oracle_alone(jobs[i], c, v, cfg)])
                used[c.gpu_type] -= c.num_gpus
        if not cfg.packing:
            return
        for k in range(i + 1, n):
            if k in assigned:
                continue
            for c, vi in options[i].items():
                if c.num_nodes != 1 or c not in options[k]:
                    continue
                r = ratios.get((c.gpu_type, jobs[i].application, jobs[k].application))
                if r is None or r[0] <= 0 or r[1] <= 0 or r[0] + r[1] < 1 + cfg.min_benefit:
                    continue
                if not oracle_memory_fits([jobs[i], jobs[k]], mem[c.gpu_type]):
                    continue
                if not oracle_bounds_hold([jobs[i], jobs[k]], list(r), cfg):
                    continue
                if used[c.gpu_type] + c.num_gpus > cluster.capacity(c.gpu_type):
                    continue
                vi_moved, vk_moved = oracle_pair_move(jobs[i], jobs[k], c, vi, options[k][c], cfg)
                if vi_moved <= 0 or vk_moved <= 0:
                    continue
                used[c.gpu_type] += c.num_gpus
                assigned[k] = c
                recurse(i + 1, assigned, used, values + [vi_moved * r[0], vk_moved * r[1]])
                del assigned[k]
                used[c.gpu_type] -= c.num_gpus

        if cfg.max_group_size >= 3:
            recurse_triples(i, assigned, used, values, recurse)

    def recurse_triples(i: int, assigned: dict, used: dict, values: list[float], go) -> None:
        for k, m in itertools.combinations(range(i + 1, n), 2):
            if k in assigned or m in assigned:
                continue
            trio = [jobs[i], jobs[k], jobs[m]]
            for c, vi in options[i].items():
                if c.num_nodes != 1 or c not in options[k] or c not in options[m]:
                    continue
                r = oracle_triple_ratios(ratios, c.gpu_type, trio)
                if r is None or sum(r) < 1 + cfg.min_benefit:
                    continue
                if not oracle_memory_fits(trio, mem[c.gpu_type]) or not oracle_bounds_hold(trio, r, cfg):
                    continue
                if used[c.gpu_type] + c.num_gpus > cluster.capacity(c.gpu_type):
                    continue
                moved = oracle_group_move(trio, c, [vi, options[k][c], options[m][c]], cfg)
                if min(moved) <= 0:
                    continue
                used[c.gpu_type] += c.num_gpus
                assigned[k] = assigned[m] = c
                go(i + 1, assigned, used, values + [v * rho for v, rho in zip(moved, r)])
                del assigned[k], assigned[m]
                used[c.gpu_type] -= c.num_gpus

    recurse(0, {}, {t.name: 0 for t in cluster}, [])
    return best


def oracle_triple_ratios(ratios, gpu_type: str, trio: list[Job]):
    """Additive slowdowns, written out: 1/ρ_x = 1/ρ_x|y + 1/ρ_x|z − 1."""
    out = []
    for x in trio:
        inverse = []
        for y in trio:
            if y is x:
                continue
            r = ratios.get((gpu_type, x.application, y.application))
            if r is None or r[0] <= 0:
                return None
            inverse.append(1 / r[0])
        out.append(1 / (inverse[0] + inverse[1] - 1))
    return out


def oracle_group_move(trio: list[Job], c, values: list[float], cfg: IlpConfig) -> list[float]:
    """Unless the three already run as one group, every member running now on c's shape is restarted."""
    names = {j.name for j in trio}
    if all(j.current_partner in names for j in trio):
        return values
    here = [n for n, j in enumerate(trio) if j.current_gpu_type == c.gpu_type and j.current_num_gpus == c.num_gpus]
    return [v * restart_factor(trio[n], cfg.restart_cost_s) if n in here else v for n, v in enumerate(values)]


@pytest.mark.parametrize("seed", range(12))
def test_brute_force_equals_ilp_on_tiny_instances(seed: int) -> None:
    num_jobs = 5 if seed % 3 else 6
    cluster, jobs, table, ratios, coloc = random_instance(seed, num_jobs)
    for p, packing in ((-0.5, True), (1.0, True), (-0.5, False)):
        cfg = IlpConfig(p=p, packing=packing, pair_candidates="all", mip_gap=0.0, time_limit_s=30)
        decision = PackingPolicy(cfg).allocate(jobs, cluster, RoundContext(TableGoodputModel(table), colocation=coloc))
        check_decision(decision, jobs, cluster)
        expected = brute_force(cluster, jobs, table, ratios, cfg)
        assert decision.solver.fallback is None
        assert decision.objective == pytest.approx(expected, rel=1e-7, abs=1e-9), (p, packing)


@pytest.mark.parametrize("seed", range(6))
def test_brute_force_equals_ilp_when_pairs_move_running_jobs(seed: int) -> None:
    """Most jobs run now on the same 1-GPU shape (two of them as partners), so many pairs force a move.

    Two GPUs for five jobs: pairs are worth their GPUs, and which of them moves decides the optimum."""
    _, jobs, table, ratios, coloc = random_instance(200 + seed, 5)
    cluster = Cluster({"big": GpuType("big", nodes=1, gpus_per_node=2, memory_gb=16)})
    rng = random.Random(seed)
    jobs = [j.with_state(num_gpus=1, current_gpu_type="big", current_num_gpus=1, age_s=rng.uniform(30, 300))
            if rng.random() < 0.8 else j for j in jobs]
    jobs[0] = jobs[0].with_state(current_gpu_type="big", current_num_gpus=1, current_partner=jobs[1].name)
    jobs[1] = jobs[1].with_state(current_gpu_type="big", current_num_gpus=1, current_partner=jobs[0].name)
    for p in (-0.5, 1.0):
        cfg = IlpConfig(p=p, pair_candidates="all", mip_gap=0.0, time_limit_s=30)
        decision = PackingPolicy(cfg).allocate(jobs, cluster, RoundContext(TableGoodputModel(table), colocation=coloc))
        check_decision(decision, jobs, cluster)
        assert decision.solver.fallback is None
        assert decision.objective == pytest.approx(brute_force(cluster, jobs, table, ratios, cfg), rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_matching_oracle_one_type_rigid_one_gpu_jobs(seed: int) -> None:
    """One GPU type, rigid 1-GPU jobs, p = 1, 2N jobs on N GPUs: optimum = N + max-weight matching of (ρa+ρb−1)."""
    rng = random.Random(100 + seed)
    gpus = 4 + seed % 3
    cluster = Cluster({"v100": GpuType("v100", nodes=1, gpus_per_node=gpus, memory_gb=32)})
    jobs = [Job(f"j{n}", f"m{n}") for n in range(2 * gpus)]
    table = {(j.application, "v100", 1): rng.uniform(50, 500) for j in jobs}
    rows, pairs = [], []
    beta = 0.05
    for a, b in itertools.combinations(jobs, 2):
        ra, rb = rng.uniform(0.3, 0.9), rng.uniform(0.3, 0.9)
        rows.append(("v100", a.application, b.application, ra, rb))
        pairs.append((a.name, b.name, ra, rb))
    context = RoundContext(TableGoodputModel(table), colocation=ColocationTable.from_rows(rows))
    for bound in (None, 2.5):  # no slowdown bound, and the default: an edge only where both ratios >= 1/2.5
        graph = nx.Graph()
        for a_name, b_name, ra, rb in pairs:
            if ra + rb >= 1 + beta and (bound is None or min(ra, rb) >= 1 / bound):
                graph.add_edge(a_name, b_name, weight=ra + rb - 1)
        matching = nx.max_weight_matching(graph)
        expected = gpus + sum(graph[u][v]["weight"] for u, v in matching)
        for candidates, top_k in (("all", 0), ("top-k", len(jobs))):
            cfg = IlpConfig(p=1.0, min_benefit=beta, pair_candidates=candidates, top_k=top_k, mip_gap=0.0,
                            max_slowdown=bound)
            decision = PackingPolicy(cfg).allocate(jobs, cluster, context)
            check_decision(decision, jobs, cluster)
            assert decision.objective == pytest.approx(expected, rel=1e-9)
            assert sum(1 for a in decision.allocations if a.partner) // 2 == len(matching)


def sia_direct_objective(cluster: Cluster, jobs: list[Job], table, cfg: IlpConfig) -> float:
    """Sia's ILP written out directly in PuLP (every configuration, no dominance, no pairs)."""
    import pulp

    configs = configurations(cluster)
    prob = pulp.LpProblem("sia", pulp.LpMinimize if cfg.p < 0 else pulp.LpMaximize)
    x, terms, per_job = {}, [], {}
    for i, job in enumerate(jobs):
        raw = {c: table.get((job.application, c.gpu_type, c.num_gpus)) for c in configs
               if job.adaptive or c.num_gpus == job.num_gpus}
        raw = {c: g for c, g in raw.items() if g}
        if not raw:
            continue
        base = min(raw.values())
        for c, g in raw.items():
            value = g / base
            if job.is_running and (c.gpu_type, c.num_gpus) != (job.current_gpu_type, job.current_num_gpus):
                value *= restart_factor(job, cfg.restart_cost_s)
            if value <= 0:
                continue
            x[i, c] = prob.add_variable(f"x_{i}_{c.gpu_type}_{c.num_gpus}", 0, 1, cat="Binary")
            terms.append(value ** cfg.p * x[i, c])
            per_job.setdefault(i, []).append(x[i, c])
    unalloc = [1 - pulp.lpSum(per_job.get(i, [])) for i in range(len(jobs))]
    prob += pulp.lpSum(terms) + (cfg.lambda_unallocated * pulp.lpSum(unalloc) if cfg.p < 0 else 0)
    for vars_ in per_job.values():
        prob += pulp.lpSum(vars_) <= 1
    for t in cluster:
        prob += pulp.lpSum(c.num_gpus * v for (i, c), v in x.items() if c.gpu_type == t.name) <= t.total_gpus
    prob.solve(pulp.HiGHS(msg=False))
    assert prob.sol_status == pulp.LpSolutionOptimal
    return pulp.value(prob.objective)


@pytest.mark.parametrize("seed", range(4))
def test_no_packing_is_exactly_sia(seed: int) -> None:
    rng = random.Random(seed)
    cluster = Cluster({"a100": GpuType("a100", 2, 8, 40), "t4": GpuType("t4", 3, 4, 16)})
    jobs, table = [], {}
    for n in range(14):
        app = f"app{n % 5}"
        jobs.append(Job(f"j{n}", app, adaptive=rng.random() < 0.6, num_gpus=rng.choice([1, 2, 4]),
                        age_s=rng.uniform(0, 900), restarts=rng.randint(0, 2),
                        current_gpu_type="a100" if n % 4 == 0 else None, current_num_gpus=2 if n % 4 == 0 else 0))
    for app in {j.application for j in jobs}:
        for c in configurations(cluster):
            table[(app, c.gpu_type, c.num_gpus)] = rng.uniform(5, 20) * c.num_gpus ** rng.uniform(0.2, 0.95)
    coloc = ColocationTable.from_rows([(t, "app0", "app1", 0.9, 0.9) for t in ("a100", "t4")])
    model = TableGoodputModel(table)
    for p in (-0.5, 1.0):
        cfg = IlpConfig(p=p, packing=False, mip_gap=0.0)
        with_table = PackingPolicy(cfg).allocate(jobs, cluster, RoundContext(model, colocation=coloc))
        without = PackingPolicy(cfg).allocate(jobs, cluster, RoundContext(model))
        assert with_table.allocations == without.allocations
        assert not any(a.partner for a in with_table.allocations)
        assert with_table.objective == pytest.approx(sia_direct_objective(cluster, jobs, table, cfg), rel=1e-7)


def test_packing_never_worse_and_pairs_share_gpus() -> None:
    cluster, jobs, table, ratios, coloc = random_instance(7, 6)
    model = TableGoodputModel(table)
    packed = PackingPolicy(IlpConfig(mip_gap=0.0)).allocate(jobs, cluster, RoundContext(model, colocation=coloc))
    alone = PackingPolicy(IlpConfig(mip_gap=0.0, packing=False)).allocate(jobs, cluster, RoundContext(model))
    assert packed.objective <= alone.objective + 1e-9  # p < 0 minimises


@pytest.mark.parametrize("seed", range(3))
def test_invariants_on_larger_random_instances(seed: int) -> None:
    rng = random.Random(seed)
    cluster = Cluster({"a": GpuType("a", 4, 8, 40), "b": GpuType("b", 6, 4, 16), "c": GpuType("c", 3, 8, 11)})
    apps = [f"app{n}" for n in range(6)]
    table = {}
    for app in apps:
        for c in configurations(cluster):
            if rng.random() < 0.95:
                table[(app, c.gpu_type, c.num_gpus)] = rng.uniform(1, 10) * c.num_gpus ** rng.uniform(0.2, 0.95)
    rows = [(t, a, b, rng.uniform(0.3, 0.95), rng.uniform(0.3, 0.95))
            for t in cluster.type_names for a, b in itertools.combinations_with_replacement(apps, 2)]
    jobs = []
    for n in range(150):
        running = rng.random() < 0.3
        adaptive = rng.random() < 0.5
        num_gpus = rng.choice([1, 1, 2, 4, 8])
        jobs.append(Job(f"j{n}", rng.choice(apps), adaptive=adaptive, num_gpus=num_gpus,
                        requirements=JobRequirements(rng.choice([None, 3.0, 10.0])), age_s=rng.uniform(0, 5000),
                        current_gpu_type=rng.choice("ab") if running else None,
                        current_num_gpus=(rng.choice([1, 2, 4]) if adaptive else num_gpus) if running else 0,
                        pinned=running and rng.random() < 0.2))
    context = RoundContext(TableGoodputModel(table), colocation=ColocationTable.from_rows(rows))
    decision = PackingPolicy(IlpConfig(time_limit_s=20)).allocate(jobs, cluster, context)
    check_decision(decision, jobs, cluster)
    by_job = decision.by_job()
    for job in jobs:  # pinned jobs keep their configuration when it is valid
        if job.pinned and (job.application, job.current_gpu_type, job.current_num_gpus) in table:
            a = by_job[job.name]  # a pinned job is always allocated (constraint (1) with equality)
            assert (a.gpu_type, a.num_gpus) == (job.current_gpu_type, job.current_num_gpus)
    placement = place(decision, cluster)
    assert not placement.unplaced
    occupants = placement.occupants()
    assert all(len(names) <= 2 for names in occupants.values())
    for a in decision.allocations:
        where = placement.of(a.job)
        assert where is not None and where.num_gpus == a.num_gpus and where.gpu_type == a.gpu_type
        if a.partner:
            assert set(placement.of(a.partner).slots()) == set(where.slots())


def test_time_limit_falls_back_without_dropping_the_round(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, jobs, table, ratios, coloc = random_instance(3, 6)
    context = RoundContext(TableGoodputModel(table), colocation=coloc)
    problem = build_problem(jobs, cluster, context.goodput, coloc, IlpConfig())
    # the greedy selection alone is feasible
    problem.check(greedy_selection(problem))
    # a solver that finds nothing in time: the round still gets a (greedy) decision
    from scheduler.ilp.solve import BACKENDS
    from scheduler.ilp.solvers.highs import RawResult

    def no_solution(problem, cfg):
        return RawResult(None, "Time limit reached", False, None, 0)

    for backend in BACKENDS:
        monkeypatch.setitem(BACKENDS, backend, no_solution)
    decision = PackingPolicy(IlpConfig(time_limit_s=1e-3)).allocate(jobs, cluster, context)
    check_decision(decision, jobs, cluster)
    assert decision.solver.fallback == "greedy"
    assert decision.solver.status == "Time limit reached"
    assert decision.allocations  # greedy allocates where anything fits


def test_broken_highs_falls_back_to_cbc(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, jobs, table, ratios, coloc = random_instance(4, 5)
    context = RoundContext(TableGoodputModel(table), colocation=coloc)
    reference = PackingPolicy(IlpConfig(mip_gap=0.0)).allocate(jobs, cluster, context)
    from scheduler.ilp.solve import BACKENDS

    def broken(problem, cfg):
        raise RuntimeError("highspy crashed")

    monkeypatch.setitem(BACKENDS, "highs", broken)
    decision = PackingPolicy(IlpConfig(mip_gap=0.0)).allocate(jobs, cluster, context)
    assert decision.solver.name.startswith("CBC")
    assert decision.objective == pytest.approx(reference.objective, rel=1e-7)


def test_real_time_limit_on_a_large_round_still_valid() -> None:
    """A real, very short HiGHS time limit: incumbent or greedy, never an invalid or missing decision."""
    rng = random.Random(11)
    cluster = Cluster({"a": GpuType("a", 16, 8, 40)})
    apps = [f"app{n}" for n in range(10)]
    table = {(app, "a", c.num_gpus): rng.uniform(1, 10) * c.num_gpus ** rng.uniform(0.3, 0.9)
             for app in apps for c in configurations(cluster)}
    rows = [("a", x, y, rng.uniform(0.3, 0.95), rng.uniform(0.3, 0.95))
            for x, y in itertools.combinations_with_replacement(apps, 2)]
    jobs = [Job(f"j{n}", rng.choice(apps), adaptive=True) for n in range(300)]
    context = RoundContext(TableGoodputModel(table), colocation=ColocationTable.from_rows(rows))
    decision = PackingPolicy(IlpConfig(time_limit_s=0.01, mip_gap=0.0)).allocate(jobs, cluster, context)
    check_decision(decision, jobs, cluster)
    assert decision.solver.time_s < 5


def test_cbc_and_pulp_highs_agree_with_highspy() -> None:
    cluster, jobs, table, ratios, coloc = random_instance(5, 6)
    context = RoundContext(TableGoodputModel(table), colocation=coloc)
    objectives = []
    for solver in ("highs", "pulp-highs", "cbc"):
        decision = PackingPolicy(IlpConfig(solver=solver, mip_gap=0.0)).allocate(jobs, cluster, context)
        check_decision(decision, jobs, cluster)
        objectives.append(decision.objective)
    assert objectives == pytest.approx([objectives[0]] * 3, rel=1e-7)


def test_restart_factor_matches_sia() -> None:
    job = Job("a", "x", age_s=1000, restarts=2)
    assert restart_factor(job, 100) == pytest.approx((1000 - 200) / 1100)
    assert restart_factor(Job("b", "x", age_s=10, restarts=1), 100) == 0.0


def test_pair_that_moves_a_running_job_pays_its_restart_factor() -> None:
    """Two rigid 1-GPU jobs both running alone on a 1-GPU shape; one GPU left: pairing restarts both.

    p = 1, ratios 0.8 / 0.7, G = 1 for both (one shape each). b (age 100 s, 1 restart, S = 25 s) has
    R_b = (100 − 25) / 125 = 0.6, a R_a = 1000 / 1025: 0.8·R_a + 0.7·0.6 = 1.20 > 1 alone.
    """
    cluster = Cluster({"v": GpuType("v", nodes=1, gpus_per_node=1, memory_gb=32)})
    model = TableGoodputModel({("x", "v", 1): 100.0, ("y", "v", 1): 50.0})
    coloc = ColocationTable.from_rows([("v", "x", "y", 0.8, 0.7)])
    cfg = IlpConfig(p=1.0, pair_candidates="all", mip_gap=0.0)
    a = Job("a", "x", age_s=1000, restarts=0, current_gpu_type="v", current_num_gpus=1)
    b = Job("b", "y", age_s=100, restarts=1, current_gpu_type="v", current_num_gpus=1)
    assert restart_factor(b, cfg.restart_cost_s) == pytest.approx(0.6)

    def decide(*jobs: Job):
        decision = PackingPolicy(cfg).allocate(list(jobs), cluster, RoundContext(model, colocation=coloc))
        check_decision(decision, list(jobs), cluster)
        return decision

    moved = decide(a, b)
    assert moved.objective == pytest.approx(0.8 * 1000 / 1025 + 0.7 * 0.6)
    assert {x.partner for x in moved.allocations} == {"a", "b"}
    # already partners: nobody moves, no charge
    together = decide(a.with_state(current_partner="b"), b.with_state(current_partner="a"))
    assert together.objective == pytest.approx(0.8 + 0.7)
    # b not running: b starts (no restart); a's group changes, so a pays R_a (serve restarts the group)
    assert decide(a, b.with_state(current_gpu_type=None, current_num_gpus=0)).objective == pytest.approx(
        0.8 * 1000 / 1025 + 0.7)
    # a mover with nothing left (R_b = 0: 4 restarts × 25 s ≥ 100 s) makes the pair worthless: one job alone
    alone = decide(a, b.with_state(restarts=4))
    assert alone.objective == pytest.approx(1.0)
    assert not any(x.partner for x in alone.allocations)


def test_pair_change_rule_charges_every_member_running_on_the_shape() -> None:
    c = configurations(tiny_cluster())[0]
    a = Job("a", "x", age_s=1000, restarts=1, current_gpu_type=c.gpu_type, current_num_gpus=c.num_gpus)
    b = Job("b", "y", age_s=500, restarts=2, current_gpu_type=c.gpu_type, current_num_gpus=c.num_gpus)
    ra, rb = restart_factor(a, 25.0), restart_factor(b, 25.0)
    # a group change restarts every member running here (as serve enacts it); one elsewhere pays R through G
    assert pair_move_values(a, b, c, 1.0, 2.0, 25.0) == pytest.approx((ra, 2.0 * rb))
    elsewhere = b.with_state(current_num_gpus=c.num_gpus * 2)
    assert pair_move_values(a, elsewhere, c, 1.0, 2.0, 25.0) == pytest.approx((ra, 2.0))
    waiting = b.with_state(current_gpu_type=None, current_num_gpus=0)  # a running job taking a waiting partner
    assert pair_move_values(a, waiting, c, 1.0, 2.0, 25.0) == pytest.approx((ra, 2.0))
    partners = (a.with_state(current_partner="b"), b.with_state(current_partner="a"))
    assert pair_move_values(*partners, c, 1.0, 2.0, 25.0) == (1.0, 2.0)


def test_ilp_config_rejects_p_zero() -> None:
    with pytest.raises(ValueError):
        IlpConfig(p=0)


def _lp_value(problem) -> float:
    import highspy

    from scheduler.ilp.solvers.highs import highs_lp

    lp, _, _ = highs_lp(problem)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.passModel(lp)
    h.run()
    return h.getInfo().objective_function_value


@pytest.mark.parametrize("seed", range(3))
def test_column_generation_reaches_the_all_pairs_lp(seed: int) -> None:
    """Pricing by rank-aligned reduced costs is exact: at convergence the LP equals the all-pairs LP."""
    from scheduler.ilp.pricing import price_pair_columns

    rng = random.Random(50 + seed)
    cluster = Cluster({"a": GpuType("a", 2, 4, 40), "b": GpuType("b", 3, 2, 16)})
    apps = [f"app{n}" for n in range(4)]
    table = {(app, c.gpu_type, c.num_gpus): rng.uniform(1, 10) * c.num_gpus ** rng.uniform(0.2, 0.9)
             for app in apps for c in configurations(cluster)}
    rows = []
    for t in cluster.type_names:
        for a, b in itertools.combinations_with_replacement(apps, 2):
            ra = rng.uniform(0.4, 0.95)
            rows.append((t, a, b, ra, ra if a == b else rng.uniform(0.4, 0.95)))  # self-pairs symmetric
    coloc = ColocationTable.from_rows(rows)
    # running jobs on a two-node shape: every pair column values them at G·R (a group change on a shape a
    # member runs on now would charge M < 1, which pricing by G does not see: exact for M = 1 only)
    jobs = [Job(f"j{n}", rng.choice(apps), adaptive=True, age_s=rng.uniform(0, 900),
                current_gpu_type="a" if n % 3 == 0 else None, current_num_gpus=8 if n % 3 == 0 else 0)
            for n in range(30)]
    model = TableGoodputModel(table)
    cfg = IlpConfig(top_k=1, pricing_passes=200)
    priced = build_problem(jobs, cluster, model, coloc, cfg)
    before = _lp_value(priced)
    price_pair_columns(priced, cfg)
    everything = build_problem(jobs, cluster, model, coloc, IlpConfig(pair_candidates="all"))
    assert priced.num_columns < everything.num_columns
    assert _lp_value(priced) == pytest.approx(_lp_value(everything), rel=1e-7)
    assert _lp_value(priced) <= before + 1e-9


@pytest.mark.parametrize("seed", range(3))
def test_held_back_singles_priced_in_give_the_same_lp_and_optimum(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large rounds start the LP from a few singles per job and price the rest in: the LP reached is the LP
    over every single, and without packing the round's optimum (gap 0) is unchanged."""
    import scheduler.ilp.build as build

    rng = random.Random(70 + seed)
    cluster = Cluster({"a": GpuType("a", 2, 8, 40), "b": GpuType("b", 3, 4, 16)})
    apps = [f"app{n}" for n in range(4)]
    table = {(app, c.gpu_type, c.num_gpus): rng.uniform(1, 10) * c.num_gpus ** rng.uniform(0.2, 0.95)
             for app in apps for c in configurations(cluster)}
    rows = [(t, a, b, rng.uniform(0.4, 0.95), rng.uniform(0.4, 0.95))
            for t in cluster.type_names for a, b in itertools.combinations_with_replacement(apps, 2)]
    coloc = ColocationTable.from_rows(rows)
    jobs = [Job(f"j{n}", rng.choice(apps), adaptive=rng.random() < 0.7, num_gpus=rng.choice([1, 2, 4]),
                age_s=rng.uniform(0, 900), current_gpu_type="a" if n % 4 == 0 else None,
                current_num_gpus=2 if n % 4 == 0 else 0) for n in range(24)]
    model = TableGoodputModel(table)
    for packing in (False, True):
        cfg = IlpConfig(packing=packing, mip_gap=0.0, pricing_passes=1)
        reference = PackingPolicy(cfg).allocate(jobs, cluster, RoundContext(model, colocation=coloc))
        monkeypatch.setattr(build, "RESERVE_ABOVE", 0)
        held = build_problem(jobs, cluster, model, coloc, cfg)
        assert held.reserved is not None and held.reserved.num_left > 0
        from scheduler.ilp.pricing import price_pair_columns
        price_pair_columns(held, cfg)
        full = build_problem(jobs, cluster, model, coloc, replace(cfg, pricing_passes=0))
        if not packing:  # same columns in the end: the priced LP is the LP over every single
            assert held.lp_weight + cfg.lambda_unallocated * len(jobs) == pytest.approx(_lp_value(full), rel=1e-9)
        decision = PackingPolicy(cfg).allocate(jobs, cluster, RoundContext(model, colocation=coloc))
        monkeypatch.setattr(build, "RESERVE_ABOVE", 20_000)
        check_decision(decision, jobs, cluster)
        if packing:  # other duals price other pairs in: a different, equally valid column set
            assert decision.objective == pytest.approx(reference.objective, rel=1e-2)
        else:
            assert decision.objective == pytest.approx(reference.objective, rel=1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_brute_force_equals_ilp_with_groups_of_three(seed: int) -> None:
    """max_group_size=3: the ILP over every pair and triple equals enumeration of alone / pairs / triples."""
    cluster, jobs, table, ratios, coloc = random_instance(300 + seed, 5 if seed % 2 else 6)
    # light jobs (pair ratios raised by 0.4), few GPUs: triples are often worth their GPU
    cluster = Cluster({"big": GpuType("big", nodes=1, gpus_per_node=2, memory_gb=24),
                       "small": GpuType("small", nodes=1, gpus_per_node=1, memory_gb=16)})
    light = [(t, a, b, min(0.95, ra + 0.4) if ra else 0.0, min(0.95, rb + 0.4) if rb else 0.0)
             for (t, a, b), (ra, rb) in ratios.items() if a <= b]
    coloc = ColocationTable.from_rows(light)
    ratios = {}
    for t, a, b, ra, rb in light:
        ratios[(t, a, b)] = (ra, rb)
        ratios[(t, b, a)] = (rb, ra)
    table = {(app, t, n): g for (app, t, n), g in table.items() if (t, n) in {("big", 1), ("big", 2), ("small", 1)}}
    for p in (-0.5, 1.0):
        cfg = IlpConfig(p=p, max_group_size=3, pair_candidates="all", mip_gap=0.0, time_limit_s=30)
        decision = PackingPolicy(cfg).allocate(jobs, cluster, RoundContext(TableGoodputModel(table), colocation=coloc))
        check_decision(decision, jobs, cluster)
        assert decision.solver.fallback is None
        assert decision.objective == pytest.approx(brute_force(cluster, jobs, table, ratios, cfg), rel=1e-7, abs=1e-9)
        pairs_only = PackingPolicy(replace(cfg, max_group_size=2)).allocate(
            jobs, cluster, RoundContext(TableGoodputModel(table), colocation=coloc))
        better = decision.objective <= pairs_only.objective + 1e-9 if p < 0 else decision.objective >= pairs_only.objective - 1e-9
        assert better  # triples only add options


def test_a_triple_is_chosen_when_three_light_jobs_share_one_gpu() -> None:
    """One GPU, three light jobs (pair ratios 0.8): the triple (ρ = 1/(1.25 + 1.25 − 1) = 2/3 each, Σ 2)
    beats any pair (Σ 1.6) plus an unallocated job; placement puts all three on the same GPU."""
    cluster = Cluster({"h": GpuType("h", nodes=1, gpus_per_node=1, memory_gb=80)})
    jobs = [Job(f"j{n}", f"m{n}", requirements=JobRequirements(10.0)) for n in range(3)]
    model = TableGoodputModel({(j.application, "h", 1): 100.0 for j in jobs})
    coloc = ColocationTable.from_rows([("h", a.application, b.application, 0.8, 0.8)
                                       for a, b in itertools.combinations(jobs, 2)])
    decision = PackingPolicy(IlpConfig(p=1.0, max_group_size=3, mip_gap=0.0)).allocate(
        jobs, cluster, RoundContext(model, colocation=coloc))
    check_decision(decision, jobs, cluster)
    assert decision.objective == pytest.approx(3 * 2 / 3)
    by_job = decision.by_job()
    assert set(by_job["j0"].others) == {"j1", "j2"}
    placement = place(decision, cluster)
    assert placement.occupants()[("h", 0, 0)] == ("j0", "j1", "j2")
    pairs = PackingPolicy(IlpConfig(p=1.0, mip_gap=0.0)).allocate(jobs, cluster, RoundContext(model, colocation=coloc))
    assert pairs.objective == pytest.approx(1.6) and len(pairs.unallocated) == 1


@pytest.mark.parametrize("seed", range(3))
def test_column_generation_with_triples_reaches_the_all_groups_lp(seed: int) -> None:
    """Pricing pairs and triples by rank-aligned reduced costs, run to the end, gives the LP over every pair
    and every triple."""
    from scheduler.ilp.pricing import price_pair_columns

    rng = random.Random(90 + seed)
    cluster = Cluster({"a": GpuType("a", 2, 4, 80), "b": GpuType("b", 3, 2, 40)})
    apps = [f"app{n}" for n in range(3)]
    table = {(app, c.gpu_type, c.num_gpus): rng.uniform(1, 10) * c.num_gpus ** rng.uniform(0.2, 0.9)
             for app in apps for c in configurations(cluster)}
    rows = []
    for t in cluster.type_names:
        for a, b in itertools.combinations_with_replacement(apps, 2):
            ra = rng.uniform(0.6, 0.95)
            rows.append((t, a, b, ra, ra if a == b else rng.uniform(0.6, 0.95)))
    coloc = ColocationTable.from_rows(rows)
    jobs = [Job(f"j{n}", rng.choice(apps), adaptive=rng.random() < 0.5, age_s=rng.uniform(0, 900))
            for n in range(16)]
    model = TableGoodputModel(table)
    cfg = IlpConfig(top_k=2, pricing_passes=200, max_group_size=3)
    priced = build_problem(jobs, cluster, model, coloc, cfg)
    price_pair_columns(priced, cfg)
    everything = build_problem(jobs, cluster, model, coloc, IlpConfig(pair_candidates="all", max_group_size=3))
    assert sum(len(m) == 3 for m in everything.members) > sum(len(m) == 3 for m in priced.members) > 0
    assert _lp_value(priced) == pytest.approx(_lp_value(everything), rel=1e-7)


def test_broken_selections_and_decisions_raise_named_errors() -> None:
    """The runtime checks raise named exceptions (not ``assert``, which ``python -O`` removes)."""
    from scheduler.ilp.problem import InvalidSelection
    from scheduler.model.policy import Allocation, InvalidDecision, RoundDecision, SolverInfo

    cluster, jobs, table, ratios, coloc = random_instance(3, 6)
    problem = build_problem(jobs, cluster, TableGoodputModel(table), coloc, IlpConfig())
    first = problem.job_columns()[0][0]
    with pytest.raises(InvalidSelection, match="more than once"):
        problem.check([first, first])
    lonely = RoundDecision((Allocation("j0", "big", 1, 1, partner="j1"),), tuple(j.name for j in jobs[1:]), 0.0,
                           SolverInfo("none", "ok", 0, 0))
    with pytest.raises(InvalidDecision, match="not paired back"):
        check_decision(lonely, jobs, cluster)


def test_group_move_rule_for_three_charges_every_member_running_on_the_shape() -> None:
    from scheduler.ilp.triples import group_move_values

    c = configurations(tiny_cluster())[0]
    here = {"current_gpu_type": c.gpu_type, "current_num_gpus": c.num_gpus}
    a, b = Job("a", "x", age_s=1000, restarts=1, **here), Job("b", "y", age_s=500, restarts=2, **here)
    new = Job("n", "z")  # not running: pays nothing
    ra, rb = restart_factor(a, 25.0), restart_factor(b, 25.0)
    assert group_move_values([a, b, new], c, [2.0, 1.0, 1.0], 25.0) == pytest.approx((2.0 * ra, rb, 1.0))
    alone = group_move_values([a, new, Job("m", "z")], c, [2.0, 1.0, 1.0], 25.0)
    assert alone == pytest.approx((2.0 * ra, 1.0, 1.0))  # the one running job is restarted by the new group
