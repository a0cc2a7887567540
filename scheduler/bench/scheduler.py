"""``colocate bench scheduler``: how long one round takes, with and without packing, and how good it is.

For each (cluster size, active jobs) case and each of ``repeats`` random rounds:

* **sia** — the ILP without pair variables (Sia's formulation);
* **top-k** — our packing ILP (pair candidates pruned to the top-k partners per job);
* **all-pairs** — the same ILP with every compatible pair as a candidate (what Gavel's packed LP does),
  under a time limit (its build time counts too); skipped, and said so, when its candidate count is
  above ``all_pairs_max_pairs``;
* **exact reference** — the optimum of the all-pairs ILP (solved to gap 0) where that finishes within
  ``exact_time_limit``; otherwise a *lower bound* on it: the all-pairs LP relaxation solved by column
  generation (pricing every pair and configuration with numpy). ``gap_vs_exact`` is then an upper bound
  on the true gap.

Clusters are Sia's 64-GPU cluster scaled by 1, 4, 16 and 32 (64 to 2,048 GPUs, as in Sia's scalability
study); jobs are drawn from Sia's six applications with Sia's profiles and GNS curves (read at run time),
a mix of adaptive and rigid jobs, some running (restart factors apply). The colocation table is the one
given, else the transferred Gavel table in ``scheduler/examples`` when present, else a seeded synthetic
one (ratios uniform in [0.4, 0.95], 10 % infeasible pairs). Times are wall-clock seconds on whatever
machine runs it; the medians over the repeats are reported.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from scheduler.bench.rounds import steady_rounds, timed_round
from scheduler.formats.colocation_table import load_colocation_table
from scheduler.ilp.build import build_problem
from scheduler.ilp.candidates import class_key
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.problem import RoundProblem
from scheduler.ilp.solvers.highs import highs_lp
from scheduler.ilp.solvers.quiet import new_highs
from scheduler.ilp.warm import WarmStart
from scheduler.model.cluster import Cluster, load_cluster
from scheduler.model.colocation import BoundedTable, ColocationTable, JobClass
from scheduler.model.goodput import ProfileGoodputModel
from scheduler.model.jobs import Job
from scheduler.model.memory import MEMORY_HEADROOM

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SIA_APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
DEFAULT_CASES = ((64, 50), (256, 200), (1024, 500), (2048, 1000))
TRANSFERRED_TABLE = EXAMPLES / "colocation-sia-transferred.csv"


def sia_cluster(num_gpus: int) -> Cluster:
    """Sia's 64-GPU heterogeneous cluster scaled to ``num_gpus`` (a multiple of 64)."""
    base = load_cluster(EXAMPLES / "sia-64gpu.yaml")
    if num_gpus % base.total_gpus:
        raise ValueError(f"cluster sizes must be multiples of {base.total_gpus}")
    return base.scaled(num_gpus // base.total_gpus)


def synthetic_jobs(cluster: Cluster, model: ProfileGoodputModel, num_jobs: int, seed: int) -> list[Job]:
    """Active jobs of one round: 70 % adaptive, rigid sizes 1/2/4/8 GPUs, about half running."""
    rng = random.Random(seed)
    jobs = []
    types = [t for t in cluster.type_names]
    for n in range(num_jobs):
        app = rng.choice(SIA_APPS)
        adaptive = rng.random() < 0.7
        num_gpus = 1 if adaptive else rng.choices([1, 2, 4, 8], weights=[60, 15, 15, 10])[0]
        curve = model.curves.get(app)
        progress = rng.uniform(0, curve.max_progress) if curve else 0.0
        running = rng.random() < 0.5
        current_type = rng.choice(types) if running else None
        current_n = (rng.choice([1, 2, 4]) if adaptive else num_gpus) if running else 0
        batch = None if adaptive else (curve.init_batch_size * num_gpus if curve else None)
        jobs.append(Job(
            name=f"{app}-{n}", application=app, adaptive=adaptive, num_gpus=num_gpus, batch_size=batch,
            max_gpus=64 if adaptive else None, age_s=rng.uniform(0, 4 * 3600), restarts=rng.randint(0, 3),
            current_gpu_type=current_type, current_num_gpus=current_n, progress=progress,
        ))
    return jobs


def synthetic_colocation(gpu_types: Sequence[str], seed: int = 0) -> ColocationTable:
    """Seeded stand-in ratios for the six Sia applications (only when no table is available)."""
    rng = random.Random(seed)
    rows = []
    for t in gpu_types:
        for a_pos, a in enumerate(SIA_APPS):
            for b in SIA_APPS[a_pos:]:
                if rng.random() < 0.1:
                    rows.append((t, a, b, 0.0, 0.0))
                else:
                    rows.append((t, a, b, rng.uniform(0.4, 0.95), rng.uniform(0.4, 0.95)))
    return ColocationTable.from_rows(rows)


def all_pairs_count(problem: RoundProblem, colocation: ColocationTable, cfg: IlpConfig) -> int:
    """How many job pairs the all-pairs formulation considers (before configurations)."""
    classes: dict[JobClass, int] = {}
    reps: dict[JobClass, Job] = {}
    for i, job in enumerate(problem.jobs):
        if problem.single_node_g[i]:
            key = class_key(job)
            classes[key] = classes.get(key, 0) + 1
            reps.setdefault(key, job)
    keys = list(classes)
    total = 0
    for a_pos, a in enumerate(keys):
        for b in keys[a_pos:]:
            best = 0.0
            for t in colocation.gpu_types:
                r = colocation.lookup(t, reps[a], reps[b])
                if r and r[0] > 0 and r[1] > 0:
                    best = max(best, r[0] + r[1])
            if best >= 1 + cfg.min_benefit:
                total += classes[a] * (classes[a] - 1) // 2 if a == b else classes[a] * classes[b]
    return total


def lp_bound_all_pairs(problem: RoundProblem, colocation: ColocationTable, cfg: IlpConfig,
                       max_iterations: int = 60, batch: int = 20000) -> tuple[float, int]:
    """Lower bound (p < 0) on the all-pairs ILP optimum: its LP relaxation, by column generation.

    ``problem`` is extended in place with priced-in pair columns. Returns (bound, iterations). Pricing:
    for every GPU type and single-node configuration, the reduced cost of every job pair at once,
    ``w_ikc − y_i − y_k − n_c·μ_t`` from the LP's row duals; columns with negative reduced cost are added
    (most negative first) until none is left, at which point the LP value is the all-pairs LP optimum.
    """

    if cfg.p >= 0:
        raise ValueError("the bound is implemented for p < 0 (minimisation)")
    problem.release_reserved()  # every single column: the bound is over every configuration
    jobs = problem.jobs
    n = len(jobs)
    class_ids: dict[JobClass, int] = {}
    reps: list[Job] = []
    cls = np.zeros(n, dtype=int)
    for i, job in enumerate(jobs):
        key = class_key(job)
        if key not in class_ids:
            class_ids[key] = len(reps)
            reps.append(job)
        cls[i] = class_ids[key]
    mem = np.array([np.nan if j.requirements.memory_gb is None else j.requirements.memory_gb for j in jobs])
    blocked = np.array(problem.pinned, dtype=bool)  # pinned jobs gain no new partner (as in build_problem)
    # first[a, b] / second[a, b]: ratios of the lower- and higher-indexed member of a pair of classes a, b
    # (as the ILP's columns assign them; a table may give two copies of one job type different ratios)
    ratio: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for t in problem.cluster.type_names:
        first = np.zeros((len(reps), len(reps)))
        second = np.zeros((len(reps), len(reps)))
        for a, ja in enumerate(reps):
            for b, jb in enumerate(reps):
                hit = colocation.lookup(t, ja, jb)
                if hit and hit[0] > 0 and hit[1] > 0 and hit[0] + hit[1] >= 1 + cfg.min_benefit:
                    first[a, b], second[a, b] = hit
        ratio[t] = (first, second)
    existing = {(mem_, c) for mem_, c in zip(problem.members, problem.conf) if len(mem_) == 2}
    by_conf: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for ci, c in enumerate(problem.configs):
        if not c.single_node:
            continue
        idx = np.array([i for i in range(n) if ci in problem.single_node_g[i] and not blocked[i]], dtype=int)
        if len(idx) >= 2:
            by_conf[ci] = (idx, np.array([problem.single_node_g[i][ci] for i in idx]))
    value = math.nan
    for iteration in range(1, max_iterations + 1):
        lp, job_row, cap_row = highs_lp(problem)
        h = new_highs()
        h.passModel(lp)
        h.run()
        value = h.getInfo().objective_function_value
        duals = np.asarray(h.getSolution().row_dual)
        y = np.zeros(n)
        for i, row in job_row.items():
            y[i] = duals[row]
        added = []
        for ci, (idx, g) in by_conf.items():
            c = problem.configs[ci]
            mu = duals[cap_row[c.gpu_type]] if c.gpu_type in cap_row else 0.0
            added += _dense_negative_pairs(problem, ci, idx, g, cls, ratio[c.gpu_type], mem, y, mu, cfg)
        added.sort()
        fresh: list[tuple[int, int, int, float, float]] = []
        for _, i, k, ci, vi, vk in added:
            if len(fresh) >= batch:
                break
            if ((i, k), ci) in existing:
                continue
            existing.add(((i, k), ci))
            fresh.append((i, k, ci, vi, vk))
        problem.add_columns([(i, k) for i, k, _, _, _ in fresh], [ci for _, _, ci, _, _ in fresh],
                            [(vi, vk) for _, _, _, vi, vk in fresh])
        if not fresh:
            return value, iteration
    return value, max_iterations


def _dense_negative_pairs(problem: RoundProblem, ci: int, idx: np.ndarray, g: np.ndarray, cls: np.ndarray,
                          ratio: tuple[np.ndarray, np.ndarray], mem: np.ndarray, y: np.ndarray, mu: float,
                          cfg: IlpConfig) -> list[tuple]:
    """Every pair of jobs ``idx`` on configuration ``ci`` with negative reduced cost, priced as one array."""
    c = problem.configs[ci]
    mem_cap = {t.name: t.memory_gb for t in problem.cluster}[c.gpu_type]
    weight = problem.objective.member_weight
    first, second = ratio
    r1 = first[np.ix_(cls[idx], cls[idx])]
    r2 = second[np.ix_(cls[idx], cls[idx])]
    ok = (r1 > 0) & (r2 > 0)
    m = mem[idx]
    # the one memory rule (scheduler.model.memory.group_fits): unknown footprints plan at 0, contexts always count
    need = (np.nan_to_num(m[:, None]) + np.nan_to_num(m[None, :])) * (1 + MEMORY_HEADROOM) + 2 * cfg.context_memory_gb
    ok &= need <= mem_cap + 1e-9
    ok &= np.triu(np.ones_like(ok, dtype=bool), k=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        va = g[:, None] * r1  # row job = lower index (upper triangle below)
        vb = g[None, :] * r2
        w = np.where(ok, weight(np.where(ok, va, 1.0)) + weight(np.where(ok, vb, 1.0)), np.inf)
    reduced = w - y[idx][:, None] - y[idx][None, :] - c.num_gpus * mu
    rows, cols = np.nonzero(reduced < -1e-9)
    return [(reduced[a, b], int(idx[a]), int(idx[b]), ci, float(va[a, b]), float(vb[a, b])) for a, b in zip(rows, cols)]


DENSE_BOUND_MAX_JOBS = 2000  # above this, the dense all-pairs pricing of lp_bound_all_pairs needs GBs: price by rank


def lp_bound_by_pricing(jobs: list[Job], cluster: Cluster, model: ProfileGoodputModel, coloc: ColocationTable,
                        cfg: IlpConfig) -> tuple[float, int]:
    """The all-pairs LP bound for large rounds: the ILP's own pricing (a sort per configuration and class
    pair, exact at convergence: a test checks it against the all-pairs LP) run until nothing is priced in."""
    from scheduler.ilp.pricing import price_pair_columns

    # one partner per job and pass: the fastest to converge, and closer to the dense all-pairs LP than 8 were
    # (2,048 GPUs / 1,000 jobs: +0.060 % vs +0.081 %, 1.0 s vs 2.2 s; 8,192 / 4,000: 11 s vs 21 s, lower LP)
    run_cfg = replace(cfg, top_k=1, pricing_passes=1000, max_group_size=2)
    problem = build_problem(jobs, cluster, model, bounded(coloc, cfg), run_cfg)
    passes = price_pair_columns(problem, run_cfg)
    if problem.lp_weight is None:
        return math.nan, passes
    return problem.objective_from_weights(problem.lp_weight), passes


def _bound_of(jobs: list[Job], cluster: Cluster, model: ProfileGoodputModel, coloc: ColocationTable,
              cfg: IlpConfig) -> tuple[float, str]:
    """The all-pairs LP bound of a round (dense pricing up to DENSE_BOUND_MAX_JOBS jobs, else by rank)."""
    if len(jobs) > DENSE_BOUND_MAX_JOBS:
        return lp_bound_by_pricing(jobs, cluster, model, coloc, cfg)[0], "lp-bound (pricing)"
    coloc = bounded(coloc, cfg)
    problem = build_problem(jobs, cluster, model, coloc, cfg)
    return lp_bound_all_pairs(problem, coloc, cfg)[0], "lp-bound"


def bounded(coloc: ColocationTable, cfg: IlpConfig) -> ColocationTable:
    """The table as the policy's ILP reads it (its slowdown bounds: :class:`scheduler.model.colocation.BoundedTable`),
    so a bound computed here bounds the policy's own problem."""
    return BoundedTable(coloc.ratios, inner=coloc, default_bound=cfg.max_slowdown) if cfg.packing else coloc


def run_case(num_gpus: int, num_jobs: int, model: ProfileGoodputModel, coloc: ColocationTable, *, repeats: int,
             cfg: IlpConfig, all_pairs_time_limit: float, all_pairs_max_pairs: int, exact_time_limit: float,
             seed: int = 0, on_step: Any = None, reference: bool = True, rounds: int = 1,
             turnover: float = 0.02) -> list[dict[str, Any]]:
    """All formulations on ``repeats`` random rounds of one (cluster, jobs) case; one dict per round.

    With ``rounds`` > 1 each repeat goes on with ``rounds − 1`` steady-state rounds (each job keeps its
    allocation, a share ``turnover`` is replaced) solved with the warm start: ``warm_*`` keys. Above
    ``DENSE_BOUND_MAX_JOBS`` jobs the bound (by pricing, 20–30 s at 4,000 jobs: the costly part) is
    computed once per case, for the last round of the first sequence."""
    cluster = sia_cluster(num_gpus)
    coloc = bounded(coloc, cfg)  # what PackingPolicy.allocate gives the ILP
    rows = []
    for rep in range(repeats):
        jobs = synthetic_jobs(cluster, model, num_jobs, seed=seed + 1000 * rep + num_jobs)
        row: dict[str, Any] = {"gpus": num_gpus, "jobs": num_jobs, "repeat": rep, "round": 1}
        sia = timed_round(jobs, cluster, model, None, replace(cfg, packing=False))
        warm = WarmStart()
        topk = timed_round(jobs, cluster, model, coloc, cfg, warm)
        for name, r in (("sia", sia), ("topk", topk)):
            for key in ("build_s", "solve_s", "round_s", "cpu_s", "objective", "columns", "status", "fallback"):
                row[f"{name}_{key}"] = r[key]
        row["topk_pairs_used"] = topk["pairs_used"]
        row["topk_triples_used"] = topk["triples_used"]
        all_cfg = replace(cfg, pair_candidates="all", time_limit_s=all_pairs_time_limit)
        count = all_pairs_count(topk["problem"], coloc, cfg)
        row["all_pairs_candidates"] = count
        if count <= all_pairs_max_pairs:
            allp = timed_round(jobs, cluster, model, coloc, all_cfg)
            for key in ("build_s", "solve_s", "round_s", "cpu_s", "objective", "columns", "status", "fallback"):
                row[f"all_{key}"] = allp[key]
        else:
            row["all_status"] = f"not attempted ({count:,} candidate pairs)"
        # exact reference: the all-pairs optimum if provable in time, else the LP bound (a lower bound)
        row["exact_kind"] = "lp-bound"
        if count <= all_pairs_max_pairs and exact_time_limit > 0:
            exact_cfg = replace(all_cfg, mip_gap=0.0, time_limit_s=exact_time_limit)
            ex = timed_round(jobs, cluster, model, coloc, exact_cfg)
            if ex["status"] == "Optimal" and ex["fallback"] is None:
                row["exact_objective"], row["exact_kind"] = ex["objective"], "ilp-optimum"
        if row["exact_kind"] == "lp-bound" and not reference:
            row["exact_kind"], row["exact_objective"] = "none", math.nan
        costly = num_jobs > DENSE_BOUND_MAX_JOBS  # the bound by pricing costs more than the rounds themselves
        if row["exact_kind"] == "lp-bound" and costly and (rounds > 1 or rep > 0):
            # one bound per case: the last round of the first sequence
            row["exact_kind"], row["exact_objective"] = "first sequence's last round only", math.nan
        if row["exact_kind"] == "lp-bound":
            row["exact_objective"], row["exact_kind"] = _bound_of(jobs, cluster, model, coloc, cfg)
        ref = row["exact_objective"]
        row["topk_gap_vs_exact"] = (row["topk_objective"] - ref) / abs(ref) if ref and ref == ref else math.nan
        rows.append(row)
        if rounds > 1:
            arrivals = iter(synthetic_jobs(cluster, model, 10 * num_jobs, seed=seed + 1000 * rep + num_jobs + 7))
            bound = ((lambda js: _bound_of(js, cluster, model, coloc, cfg))
                     if reference and not (costly and rep > 0) else None)
            for steady in steady_rounds(jobs, topk, cluster, model, coloc, cfg, warm, rounds=rounds,
                                        turnover=turnover, arrivals=arrivals, seed=seed + rep, reference=bound):
                rows.append({"gpus": num_gpus, "jobs": num_jobs, "repeat": rep, **steady})
        if on_step is not None:
            on_step()
    return rows


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians per (gpus, jobs) case."""
    out = []
    keys = sorted({(r["gpus"], r["jobs"]) for r in rows})
    for gpus, jobs in keys:
        group = [r for r in rows if (r["gpus"], r["jobs"]) == (gpus, jobs)]

        def med(key: str, group: list[dict[str, Any]] = group) -> float:
            values = [r[key] for r in group if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]
            return statistics.median(values) if values else math.nan

        summary = {"gpus": gpus, "jobs": jobs, "repeats": sum(1 for r in group if r.get("round", 1) == 1),
                   "warm_rounds": sum(1 for r in group if r.get("round", 1) > 1)}
        for key in ("sia_round_s", "sia_cpu_s", "sia_solve_s", "topk_build_s", "topk_solve_s", "topk_round_s",
                    "topk_cpu_s", "all_cpu_s", "all_round_s",
                    "all_solve_s", "topk_columns", "all_columns", "topk_pairs_used", "topk_triples_used", "all_pairs_candidates",
                    "topk_gap_vs_exact", "warm_round_s", "warm_cpu_s", "warm_build_s", "warm_solve_s", "warm_gap",
                    "warm_columns"):
            summary[key] = med(key)
        summary["max_gap_vs_exact"] = max((r["topk_gap_vs_exact"] for r in group if "topk_gap_vs_exact" in r),
                                          default=math.nan)
        summary["max_warm_gap"] = max((r["warm_gap"] for r in group if "warm_gap" in r), default=math.nan)
        summary["speedup_vs_all_pairs"] = (summary["all_round_s"] / summary["topk_round_s"]
                                           if summary["all_round_s"] == summary["all_round_s"] else math.nan)
        statuses = sorted({str(r.get("all_status")) for r in group if r.get("round", 1) == 1})
        summary["all_status"] = "/".join(statuses)
        summary["exact_kind"] = "/".join(sorted({r["exact_kind"] for r in group if "exact_kind" in r}))
        out.append(summary)
    return out


def growth_plot(summary: list[dict[str, Any]], path: Path) -> None:
    """Log-log plot of the median round CPU time against cluster size (packing and Sia), with y ∝ GPUs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpus = [s["gpus"] for s in summary]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.loglog(gpus, [s["topk_cpu_s"] for s in summary], "o-", label="packing, cold round (top-k + pricing)")
    warm = [(s["gpus"], s["warm_cpu_s"]) for s in summary if s.get("warm_rounds")]
    if warm:
        ax.loglog([g for g, _ in warm], [t for _, t in warm], "^-", label="packing, warm rounds (steady state)")
    ax.loglog(gpus, [s["sia_cpu_s"] for s in summary], "s--", label="Sia, no packing")
    ref = summary[0]["topk_cpu_s"]
    ax.loglog(gpus, [ref * g / gpus[0] for g in gpus], ":", color="grey", label="∝ GPUs (linear)")
    ax.set_xlabel("GPUs (active jobs ≈ GPUs / 2)")
    ax.set_ylabel("round time, CPU s (median)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def bench_colocation(path: Path | None, gpu_types: Sequence[str]) -> tuple[ColocationTable, str]:
    if path is not None:
        return load_colocation_table(path), str(path)
    if TRANSFERRED_TABLE.is_file():
        return load_colocation_table(TRANSFERRED_TABLE), str(TRANSFERRED_TABLE.name)
    return synthetic_colocation(gpu_types), "synthetic (seeded)"
