"""Building one round's problem: configurations, each job's columns, seeded group columns."""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from scheduler.ilp.candidates import held_pairs, pair_candidates
from scheduler.ilp.columns import JobColumns, Shapes, add_pair_columns, job_options, shape_for, shapes_for
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.objective import Objective
from scheduler.ilp.pricing import PricingData
from scheduler.ilp.problem import ReservedSingles, RoundProblem
from scheduler.ilp.triples import add_triple_columns, all_triples, triple_candidates
from scheduler.ilp.warm import WarmStart
from scheduler.model.cluster import Cluster
from scheduler.model.configs import configurations
from scheduler.model.goodput import GoodputModel
from scheduler.model.jobs import Job

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.colocation import ColocationTable


@contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector for one round's build or solve.

    A round allocates ~10^5 small tuples and estimates that form no cycles; in a long-lived process (the
    simulator, the benchmark) each allocation burst triggers full collections over everything else alive,
    which cost more than the work itself. Nothing is lost: collection resumes (and catches up) afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# Rounds with more single columns than this start the LP from a subset of them (see _hold_back_singles).
RESERVE_ABOVE = 20_000
KEEP_PER_GPU, KEEP_BEST = 2, 1


def _hold_back_singles(problem: RoundProblem, singles: list[tuple]) -> list[tuple]:
    """The singles a large round's first LP starts from; the rest go to ``problem.reserved`` for pricing.

    Kept per job: its ``KEEP_PER_GPU`` columns of best weight per GPU, its ``KEEP_BEST`` of best weight,
    and its current configuration (a pinned job keeps all of its columns). The LP solved by pricing to
    the end is the same LP as with every single; the solve stage releases the rest before branching.
    """
    jobs, configs = problem.jobs, problem.configs
    job = np.fromiter((s[0] for s in singles), dtype=np.int64, count=len(singles))
    conf = np.fromiter((s[1] for s in singles), dtype=np.int64, count=len(singles))
    gpus = np.array([c.num_gpus for c in configs], dtype=np.int64)[conf]
    weight = np.asarray(problem.objective.column_weights([(s[2],) for s in singles]), dtype=float)
    keep = _rank_in_job(job, weight / gpus) < KEEP_PER_GPU
    keep |= _rank_in_job(job, weight) < KEEP_BEST
    type_index = {name: n for n, name in enumerate(problem.cluster.type_names)}
    conf_type = np.array([type_index[c.gpu_type] for c in configs], dtype=np.int64)
    conf_n = np.array([c.num_gpus for c in configs], dtype=np.int64)
    cur_type = np.array([type_index.get(j.current_gpu_type or "", -1) if j.is_running else -2 for j in jobs])
    cur_n = np.array([j.current_num_gpus for j in jobs], dtype=np.int64)
    keep |= (conf_type[conf] == cur_type[job]) & (conf_n[conf] == cur_n[job])
    keep |= np.asarray(problem.pinned, dtype=bool)[job]
    held = np.nonzero(~keep)[0]
    problem.reserved = ReservedSingles(
        job=job[held], conf=conf[held], gpus=gpus[held], type_of=conf_type[conf[held]], weight=weight[held],
        values=[singles[n][2] for n in held.tolist()], estimates=[singles[n][3] for n in held.tolist()],
        released=np.zeros(len(held), dtype=bool))
    return [singles[n] for n in np.nonzero(keep)[0].tolist()]


def _rank_in_job(job: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Each entry's rank (0 = lowest score) among the entries of the same job."""
    order = np.lexsort((score, job))
    sorted_job = job[order]
    starts = np.r_[0, np.nonzero(np.diff(sorted_job))[0] + 1]
    position = np.arange(len(job)) - np.repeat(starts, np.diff(np.r_[starts, len(job)]))
    rank = np.empty(len(job), dtype=np.int64)
    rank[order] = position
    return rank


def build_problem(jobs: Sequence[Job], cluster: Cluster, goodput: GoodputModel,
                  colocation: "ColocationTable | None" = None, cfg: IlpConfig = IlpConfig(),
                  warm: WarmStart | None = None) -> RoundProblem:
    """Columns of the round ILP (see the module docstring); with ``warm`` (the state the previous round
    left, :mod:`scheduler.ilp.warm`) its groups are seeded and its priced-in singles kept."""
    with gc_paused():
        return _build_problem(jobs, cluster, goodput, colocation, cfg,
                              warm if warm is not None and cfg.warm_start else None)


def _build_problem(jobs: Sequence[Job], cluster: Cluster, goodput: GoodputModel,
                   colocation: "ColocationTable | None", cfg: IlpConfig, warm: WarmStart | None) -> RoundProblem:
    started = time.perf_counter()
    jobs = tuple(jobs)
    configs = list(configurations(cluster))
    sia_shapes = frozenset(configs)
    index = {c: i for i, c in enumerate(configs)}
    for job in jobs:  # rigid multi-node shapes that are not in Sia's list (e.g. 12 GPUs on 8-GPU nodes)
        if not job.adaptive:
            for t in cluster:
                shapes = shape_for(job, t.name, t.gpus_per_node)
                if shapes and shapes[0] not in index and shapes[0].num_gpus <= t.total_gpus:
                    index[shapes[0]] = len(configs)
                    configs.append(shapes[0])
    configs_t = tuple(configs)
    problem = RoundProblem(jobs, cluster, configs_t, Objective.of(cfg))
    shape_cache: dict[tuple, Shapes] = {}
    type_index = {name: n for n, name in enumerate(cluster.type_names)}
    groups: dict[tuple, list[int]] = {}  # jobs by the shapes they may use
    for i, job in enumerate(jobs):
        memory = job.requirements.memory_gb
        kind = (job.adaptive, job.max_gpus, memory) if job.adaptive else (False, job.num_gpus, memory)
        if kind not in shape_cache:
            shape_cache[kind] = shapes_for(job, cluster, configs_t, index, cfg, sia_shapes)
        groups.setdefault(kind, []).append(i)
    options: list[JobColumns] = [JobColumns() for _ in jobs]
    for kind, members in groups.items():
        found = job_options([jobs[i] for i in members], shape_cache[kind], configs_t, goodput, cfg, type_index)
        for i, opts in zip(members, found):
            options[i] = opts
    problem.pinned = [o.pinned for o in options]
    problem.single_node_g = [{ci: g for ci, (g, _) in o.single.items()} for o in options]
    singles = [(i, ci, g, est) for i, opt in enumerate(options) for ci, (g, est) in opt.alone.items()]
    if len(singles) > RESERVE_ABOVE and cfg.pricing_passes > 0 and cfg.solver == "highs":
        singles = _hold_back_singles(problem, singles)
    problem.add_columns([(i,) for i, _, _, _ in singles], [ci for _, ci, _, _ in singles],
                        [(g,) for _, _, g, _ in singles], [(est,) for _, _, _, est in singles])
    if warm is not None and problem.reserved is not None:
        problem.release_reserved(warm.released_singles(problem))
    if cfg.packing and colocation is not None and len(colocation):
        # warm: last round's groups stand in for the graph's seeds, except for jobs new to this round
        only = warm.new_jobs(problem) if warm is not None and warm.rounds else None
        candidates, graph = pair_candidates(jobs, options, configs_t, colocation, cfg, only=only)
        if warm is not None:
            candidates |= warm.seed_groups(problem, 2)  # type: ignore[arg-type]
        candidates |= held_pairs(jobs)
        add_pair_columns(problem, sorted(candidates), options, colocation, cfg)
        if cfg.max_group_size >= 3:
            triples = set(all_triples(jobs, options, configs_t) if cfg.pair_candidates == "all"
                          else triple_candidates(candidates, limit_per_job=cfg.top_k))
            if warm is not None:  # seeded groups of three are sorted index triples
                triples |= {(g[0], g[1], g[2]) for g in warm.seed_groups(problem, 3)}
            add_triple_columns(problem, sorted(triples), options, colocation, cfg)
        problem.num_group_candidates = len(candidates)
        if cfg.pair_candidates == "top-k" and cfg.top_k > 0 and cfg.pricing_passes > 0:
            problem.pricing = PricingData(options, graph, colocation)
    if problem.reserved is not None and problem.pricing is None:
        problem.pricing = PricingData(options, None, None)  # singles only
    problem.build_time_s = time.perf_counter() - started
    return problem
