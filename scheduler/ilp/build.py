"""Building one round's problem: configurations, each job's columns, seeded group columns."""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Sequence

from scheduler.cluster import Cluster
from scheduler.configs import configurations
from scheduler.goodput import GoodputModel
from scheduler.ilp.candidates import pair_candidates
from scheduler.ilp.columns import JobColumns, Shapes, add_pair_columns, job_options, shape_for, shapes_for
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.objective import Objective
from scheduler.ilp.pricing import PricingData
from scheduler.ilp.problem import RoundProblem
from scheduler.jobs import Job

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.colocation import ColocationTable


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


def build_problem(jobs: Sequence[Job], cluster: Cluster, goodput: GoodputModel,
                  colocation: "ColocationTable | None" = None, cfg: IlpConfig = IlpConfig()) -> RoundProblem:
    """Columns of the round ILP (see the module docstring)."""
    with gc_paused():
        return _build_problem(jobs, cluster, goodput, colocation, cfg)


def _build_problem(jobs: Sequence[Job], cluster: Cluster, goodput: GoodputModel,
                   colocation: "ColocationTable | None", cfg: IlpConfig) -> RoundProblem:
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
        kind = (job.adaptive, job.max_gpus, job.memory_gb) if job.adaptive else (False, job.num_gpus, job.memory_gb)
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
    problem.add_columns([(i,) for i, _, _, _ in singles], [ci for _, ci, _, _ in singles],
                        [(g,) for _, _, g, _ in singles], [(est,) for _, _, _, est in singles])
    if cfg.packing and colocation is not None and len(colocation):
        candidates, graph = pair_candidates(jobs, options, configs_t, colocation, cfg)
        if not cfg.seed_partners and cfg.pair_candidates == "top-k" and cfg.pricing_passes > 0:
            candidates = set()
        add_pair_columns(problem, sorted(candidates), options, colocation, cfg)
        problem.num_group_candidates = len(candidates)
        if cfg.pair_candidates == "top-k" and cfg.top_k > 0 and cfg.pricing_passes > 0:
            problem.pricing = PricingData(options, graph, colocation)
    problem.build_time_s = time.perf_counter() - started
    return problem
