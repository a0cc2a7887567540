"""Columns of the round ILP: each job's valid configurations (Sia's normalised, restart-adjusted goodput,
dominance-filtered) and the group columns built from them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from scheduler.ilp.config import IlpConfig
from scheduler.ilp.objective import Objective, beneficial_ratio
from scheduler.ilp.problem import RoundProblem
from scheduler.model.cluster import Cluster
from scheduler.model.colocation import class_key
from scheduler.model.configs import Configuration
from scheduler.model.goodput import GoodputEstimate, GoodputModel, estimate_arrays
from scheduler.model.jobs import Job
from scheduler.model.memory import group_fits

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.colocation import ColocationTable


def restart_factor(job: Job, restart_cost_s: float) -> float:
    """Sia's ``max(T − N·S, 0) / (T + S)``: how much of a move's goodput survives the restart (S: the job's
    own ``restart_cost_s`` when set)."""
    restart_cost_s = job.restart_cost_s if job.restart_cost_s is not None else restart_cost_s
    denom = job.age_s + restart_cost_s
    if denom <= 0:
        return 1.0
    return max(job.age_s - job.restarts * restart_cost_s, 0.0) / denom


def pair_move_values(a: Job, b: Job, c: Configuration, ga: float, gb: float, restart_cost_s: float
                     ) -> tuple[float, float]:
    """Normalised goodputs ``(G'_a, G'_b)`` of ``a`` and ``b`` sharing ``c`` after the group-change restart.

    Unless the two already run as partners, a change of partners restarts every member running now on c's
    type and GPU count (each pays its restart factor), as ``colocate serve`` enacts it (a group is started as a
    whole). A member on another configuration already carries the factor in ``G``; one not running pays
    nothing. Charging the member that stays too is the hysteresis that keeps a pair from being formed for a
    round's instantaneous goodput and split again (``results/sim/packing-pays/NOTES.md``).
    """
    if a.current_partner == b.name and b.current_partner == a.name:
        return ga, gb
    here = (c.gpu_type, c.num_gpus)
    on_a = a.is_running and (a.current_gpu_type, a.current_num_gpus) == here
    on_b = b.is_running and (b.current_gpu_type, b.current_num_gpus) == here
    return (ga * restart_factor(a, restart_cost_s) if on_a else ga,
            gb * restart_factor(b, restart_cost_s) if on_b else gb)


def shape_for(job: Job, gpu_type: str, per_node: int) -> tuple[Configuration, Configuration] | None:
    """A rigid job's (reserved, used) shapes on a type: its own count; multi-node jobs take whole nodes."""
    n = job.num_gpus
    if n <= per_node:
        return Configuration(gpu_type, 1, n), Configuration(gpu_type, 1, n)
    nodes = -(-n // per_node)
    return Configuration(gpu_type, nodes, nodes * per_node), Configuration(gpu_type, nodes, n)


@dataclass
class JobColumns:
    """Per job: columns to offer alone (after dominance) and every valid single-node configuration (for pairs).

    Both map a configuration index to (normalised G after the restart factor, estimate).
    """

    alone: dict[int, tuple[float, GoodputEstimate]] = field(default_factory=dict)
    single: dict[int, tuple[float, GoodputEstimate]] = field(default_factory=dict)
    pinned: bool = False
    split_cache: dict[str, dict[int, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Shapes:
    """The configurations one kind of job may use: reserved (capacity) and used (goodput) shapes.

    Shapes are sorted by (GPU type, size) so dominance is one running maximum over the array.
    """

    reserved: "np.ndarray"          # indices into the round's configuration list
    used: tuple[Configuration, ...]
    type_of: "np.ndarray"           # small int per shape: its GPU type
    size: "np.ndarray"              # reserved GPUs
    single_node: "np.ndarray"       # bool
    segment_start: "np.ndarray"     # bool: first shape of its GPU type


_SHAPES: dict[tuple, Shapes] = {}


def shapes_for(job: Job, cluster: Cluster, configs: tuple[Configuration, ...], index: dict[Configuration, int],
                cfg: IlpConfig, sia_shapes: frozenset[Configuration]) -> Shapes:
    """The shapes of ``job``'s kind (``index``: each configuration's position in ``configs``).

    Kept across rounds (read-only) for the same cluster and configurations, so every round passes the
    same ``used`` tuple to the goodput model, whose caches then hit by identity.
    """
    memory = job.requirements.memory_gb
    kind = (job.adaptive, job.max_gpus, memory) if job.adaptive else (False, job.num_gpus, memory)
    key = (kind, cluster, configs, cfg.max_gpus_per_job, sia_shapes)
    shapes = _SHAPES.get(key)
    if shapes is None:
        shapes = _make_shapes(job, cluster, configs, index, cfg, sia_shapes)
        for array in (shapes.reserved, shapes.type_of, shapes.size, shapes.single_node, shapes.segment_start):
            array.setflags(write=False)
        if len(_SHAPES) > 256:
            _SHAPES.clear()
        _SHAPES[key] = shapes
    return shapes


def _make_shapes(job: Job, cluster: Cluster, configs: tuple[Configuration, ...], index: dict[Configuration, int],
                 cfg: IlpConfig, sia_shapes: frozenset[Configuration]) -> Shapes:
    entries: list[tuple[int, int, int, Configuration]] = []  # (type, size, reserved index, used shape)
    types = {name: n for n, name in enumerate(cluster.type_names)}
    memory = job.requirements.memory_gb
    for t in cluster:
        if memory is not None and memory > t.memory_gb:
            continue
        if job.adaptive:
            cap = job.max_gpus if job.max_gpus is not None else cfg.max_gpus_per_job
            for c in configs:
                if c.gpu_type == t.name and (cap is None or c.num_gpus <= cap) and c in sia_shapes:
                    entries.append((types[t.name], c.num_gpus, index[c], c))
        else:
            shapes = shape_for(job, t.name, t.gpus_per_node)
            if shapes is None or shapes[0] not in index:
                continue
            entries.append((types[t.name], shapes[0].num_gpus, index[shapes[0]], shapes[1]))
    entries.sort(key=lambda e: (e[0], e[1]))
    type_of = np.array([e[0] for e in entries], dtype=int)
    start = np.ones(len(entries), dtype=bool)
    if len(entries) > 1:
        start[1:] = type_of[1:] != type_of[:-1]
    return Shapes(
        reserved=np.array([e[2] for e in entries], dtype=int), used=tuple(e[3] for e in entries),
        type_of=type_of, size=np.array([e[1] for e in entries], dtype=int),
        single_node=np.array([configs[e[2]].single_node for e in entries], dtype=bool), segment_start=start,
    )


def job_options(jobs: Sequence[Job], shapes: Shapes, configs: tuple[Configuration, ...], goodput: GoodputModel,
                 cfg: IlpConfig, type_index: Mapping[str, int]) -> list[JobColumns]:
    """Valid configurations of jobs sharing one set of shapes, with Sia's normalised, restart-adjusted
    goodput, dominance-filtered: one :class:`JobColumns` per job.

    The jobs' estimates are stacked into (jobs × shapes) arrays so each step is one numpy operation for
    the whole group rather than one per job (shapes number ~30, so per-job calls cost mostly overhead).
    """
    outs = [JobColumns() for _ in jobs]
    if not shapes.used or not jobs:
        return outs
    per_job = [estimate_arrays(goodput, job, shapes.used) for job in jobs]
    raw = np.array([a.goodput for a in per_job], dtype=float)
    g = np.nan_to_num(raw, nan=0.0)
    valid = g > 0
    running = np.array([job.is_running for job in jobs], dtype=bool)
    current_type = np.array([type_index.get(job.current_gpu_type or "", -1) if job.is_running else -1 for job in jobs])
    current_size = np.array([job.current_num_gpus if job.is_running else -1 for job in jobs])
    is_current = (running[:, None] & (shapes.type_of[None, :] == current_type[:, None])
                  & (shapes.size[None, :] == current_size[:, None]))
    # a pinned job that can run on its current configuration is held there
    pinned = np.array([job.pinned for job in jobs], dtype=bool) & (valid & is_current).any(axis=1)
    valid = np.where(pinned[:, None], valid & is_current, valid)
    smallest = np.where(valid, g, np.inf).min(axis=1)
    G = np.where(valid, g / smallest[:, None], 0.0)
    factor = np.array([restart_factor(job, cfg.restart_cost_s) for job in jobs])
    G = np.where(is_current | ~running[:, None], G, G * factor[:, None])
    if cfg.charge_resumes:  # resuming a stopped job is a restart too (Sia's factor, bounded below)
        resumed = ~running & np.array([job.restarts > 0 for job in jobs], dtype=bool)
        G = np.where(resumed[:, None], G * np.maximum(factor, cfg.resume_floor)[:, None], G)
    if cfg.keep_bonus:
        G = np.where(is_current, G * (1.0 + cfg.keep_bonus), G)
    valid &= G > 0
    G = np.where(valid, G, 0.0)
    G_alone = _split_values(jobs, G, is_current, factor, cfg)
    # dominance inside each GPU type: shapes are sorted by (type, size); lifting each type's values above
    # the previous types' lets one running maximum serve every segment
    lifted = G + shapes.type_of[None, :] * (G.max(axis=1)[:, None] + 1.0)
    running_max = np.maximum.accumulate(lifted, axis=1)
    prev = np.empty_like(running_max)
    prev[:, 0] = -np.inf
    prev[:, 1:] = running_max[:, :-1]
    prev[:, shapes.segment_start] = -np.inf
    keep = valid & (lifted > prev + 1e-12 * np.abs(lifted))
    rows, cols = np.nonzero((keep | (valid & shapes.single_node[None, :])) & (raw > 0))
    # plain Python lists for the per-entry loop: indexing numpy scalars one by one costs more than the
    # estimates themselves
    g_l, alone_l = G[rows, cols].tolist(), G_alone[rows, cols].tolist()
    keep_l, single_l = keep[rows, cols].tolist(), shapes.single_node[cols].tolist()
    ci_l, row_l, col_l = shapes.reserved[cols].tolist(), rows.tolist(), cols.tolist()
    # each job's estimates as objects, built once per estimate arrays (the goodput model hands back the
    # same arrays while a job's estimates do not change, so most rounds build none)
    estimates = [a.estimates for a in per_job]
    for n in range(len(row_l)):
        out = outs[row_l[n]]
        estimate = estimates[row_l[n]][col_l[n]]
        if keep_l[n]:
            out.alone[ci_l[n]] = (alone_l[n], estimate)
        if single_l[n]:
            out.single[ci_l[n]] = (g_l[n], estimate)
    for out, is_pinned in zip(outs, pinned.tolist()):
        out.pinned = is_pinned
    return outs


def _split_values(jobs: Sequence[Job], G: "np.ndarray", is_current: "np.ndarray", factor: "np.ndarray",
                  cfg: IlpConfig) -> "np.ndarray":
    """The values of running alone: ``G``, except that a member of a running group alone on its own GPUs pays
    its restart factor (at least ``resume_floor``, so a split still keeps one job running): ``colocate serve``
    restarts a group whose members change, the one that stays included, and in the simulator one of the two
    moves. Keeping the same group (the pair columns, from ``single``) stays uncharged."""
    grouped = np.array([job.is_running and job.current_partner is not None for job in jobs], dtype=bool)
    if not grouped.any():
        return G
    split = grouped[:, None] & is_current
    return np.where(split, G * np.maximum(factor, cfg.resume_floor)[:, None], G)


def split_beats_pair(a: JobColumns, b: JobColumns, c: Configuration, configs: tuple[Configuration, ...],
                      va: float, vb: float, cfg: IlpConfig) -> bool:
    """True when ``a`` and ``b`` alone on two shapes of c's type with n_a + n_b ≤ n_c do at least as well.

    Such a pair column can never improve the optimum (it uses as many GPUs of the same type for no more
    objective), so it is not generated. Only single-node shapes can fit inside a single-node pair.
    """
    if c.num_gpus < 2:
        return False
    pair_w = Objective.of(cfg).column_weight((va, vb))
    best_a = best_weight_by_size(a, c.gpu_type, configs, cfg)  # cached per job and type
    best_b = best_weight_by_size(b, c.gpu_type, configs, cfg)
    n = c.num_gpus
    for na, wa in best_a.items():
        for nb, wb in best_b.items():
            if na + nb <= n and wa + wb <= pair_w:
                return True
    return False


def _best_split(tables: dict[str, list[tuple[int, float]]], a: JobColumns, b: JobColumns, c: Configuration,
                configs: tuple[Configuration, ...], cfg: IlpConfig) -> float:
    """The lowest ``w_a + w_b`` of ``a`` and ``b`` alone, split, on ``n_a + n_b ≤ n_c`` GPUs of c's type:
    :func:`split_beats_pair`'s test as one comparison, from a table built once per pair and GPU type."""
    table = tables.get(c.gpu_type)
    if table is None:
        best_a = best_weight_by_size(a, c.gpu_type, configs, cfg)  # cached per job and type
        best_b = best_weight_by_size(b, c.gpu_type, configs, cfg)
        by_total: dict[int, float] = {}
        for na, wa in best_a.items():
            for nb, wb in best_b.items():
                w = wa + wb
                if w < by_total.get(na + nb, math.inf):
                    by_total[na + nb] = w
        table, running = [], math.inf
        for total in sorted(by_total):  # running minimum: the best split on at most ``total`` GPUs
            running = min(running, by_total[total])
            table.append((total, running))
        tables[c.gpu_type] = table
    best = math.inf
    for total, w in table:
        if total > c.num_gpus:
            break
        best = w
    return best


def best_weight_by_size(opts: JobColumns, gpu_type: str, configs: tuple[Configuration, ...], cfg: IlpConfig
                         ) -> dict[int, float]:
    """Single-node size -> the best (lowest) weight of running the job alone on at most that many GPUs."""
    cached = opts.split_cache.get(gpu_type)
    if cached is not None:
        return cached
    objective = Objective.of(cfg)
    weights: dict[int, float] = {}
    for ci, (g, _) in opts.single.items():
        c = configs[ci]
        if c.gpu_type == gpu_type:
            weights[c.num_gpus] = min(weights.get(c.num_gpus, math.inf), objective.column_weight((g,)))
    best: dict[int, float] = {}
    running = math.inf
    for n in sorted(weights):
        running = min(running, weights[n])
        best[n] = running
    opts.split_cache[gpu_type] = best
    return best




def add_pair_columns(problem: RoundProblem, candidates: Sequence[tuple[int, int]], options: Sequence[JobColumns],
                      colocation: "ColocationTable", cfg: IlpConfig) -> None:
    """Pair columns for candidate job pairs: every common single-node configuration that is not dominated."""
    jobs, configs_t = problem.jobs, problem.configs
    mem_of = {t.name: t.memory_gb for t in problem.cluster}
    single_node = [c.single_node for c in configs_t]
    order_key = [(c.gpu_type, c.num_gpus) for c in configs_t]
    objective, min_benefit, restart_cost_s = Objective.of(cfg), cfg.min_benefit, cfg.restart_cost_s
    new: list[tuple] = []
    ratio_caches: dict[tuple, dict[str, tuple[float, float] | None]] = {}
    for i, k in candidates:
        a, b = jobs[i], jobs[k]
        opts_i, opts_k = options[i], options[k]
        if opts_i.pinned or opts_k.pinned:
            # a pinned job keeps its configuration; it may keep (not gain) a partner
            if not (a.current_partner == b.name and b.current_partner == a.name):
                continue
        # ratios depend only on the two jobs' classes (and, for a held pair, on its being held: a bounded table
        # keeps a held pair's ratio): one cache per class pair for the whole call
        held = (a.pinned or b.pinned) and a.current_partner == b.name and b.current_partner == a.name
        ratio_cache = ratio_caches.setdefault((class_key(a), class_key(b), held), {})
        kept: dict[str, list[tuple[float, float]]] = {}
        split_tables: dict[str, list[tuple[int, float]]] = {}
        single_i, single_k = opts_i.single, opts_k.single
        common = sorted((ci for ci in single_i if ci in single_k and single_node[ci]), key=order_key.__getitem__)
        for ci in common:
            c = configs_t[ci]
            r = beneficial_ratio(colocation, ratio_cache, c.gpu_type, a, b, min_benefit)
            if r is None:
                continue
            if not group_fits(mem_of[c.gpu_type], (a.requirements.memory_gb, b.requirements.memory_gb), cfg.context_memory_gb):
                continue
            gi, ei = single_i[ci]
            gk, ek = single_k[ci]
            gi, gk = pair_move_values(a, b, c, gi, gk, restart_cost_s)
            if gi <= 0 or gk <= 0:
                continue  # a member's restart leaves it nothing (as for G_ic = 0, the column is dropped)
            vi, vk = gi * r[0], gk * r[1]
            seen = kept.setdefault(c.gpu_type, [])
            if any(pi >= vi and pk >= vk for pi, pk in seen):
                continue  # a smaller shape of this type is at least as good for both jobs
            if c.num_gpus >= 2 and objective.column_weight((vi, vk)) >= _best_split(
                    split_tables, opts_i, opts_k, c, configs_t, cfg):
                continue  # running both alone on the same GPUs, split, is at least as good
            seen.append((vi, vk))
            new.append(((i, k), ci, (vi, vk), (ei, ek), (r[0], r[1])))
    problem.add_columns([n[0] for n in new], [n[1] for n in new], [n[2] for n in new], [n[3] for n in new],
                        [n[4] for n in new])

