"""Groups of three jobs on one GPU set (``IlpConfig.max_group_size=3``).

Ratios: a table of measured triples is not available yet (the profiler's triple cells have not been run at
scale), so a triple's ratios are *predicted* from its three pairs by adding slowdowns: for member ``x``
with others ``y`` and ``z``, ``1/ρ_x = 1 + (1/ρ_x|y − 1) + (1/ρ_x|z − 1)`` — each partner adds the
slowdown it causes alone. Plain time-slicing (ρ = 1/2 in every pair) gives ρ = 1/3 each, as it should;
a triple is known only when all three pairs are measured (or predicted) with positive ratios.

Columns: seeded from the pair candidates (a triple whose three members include a candidate pair and a
candidate partner of one of them), on every common single-node configuration, with memory for three,
``Σ ρ ≥ 1 + β``, and the move rule of :func:`group_move_values`; then priced in with the pairs
(:func:`dual_ranked_triples`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations_with_replacement
from typing import TYPE_CHECKING

import numpy as np

from scheduler.ilp.candidates import class_key
from scheduler.ilp.columns import JobColumns, restart_factor
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.objective import Objective
from scheduler.ilp.problem import RoundProblem
from scheduler.model.configs import Configuration
from scheduler.model.jobs import Job
from scheduler.model.memory import group_fits

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.colocation import ColocationTable


def predicted_triple_ratios(colocation: "ColocationTable", gpu_type: str, jobs: Sequence[Job]
                            ) -> tuple[float, float, float] | None:
    """Each member's ratio in a group of three (:meth:`scheduler.model.colocation.ColocationTable.triple_ratios`:
    predicted from the pairs by adding slowdowns; a memory-checked table also answers None when the three
    do not fit together); None if unknown."""
    return colocation.triple_ratios(gpu_type, jobs)


def group_move_values(members: Sequence[Job], c: Configuration, values: Sequence[float], restart_cost_s: float
                      ) -> tuple[float, ...]:
    """Members' normalised goodputs on ``c`` after the restarts that forming the group costs.

    Unless the members already run as one group (each names another member as its current partner), every
    member running now on c's type and GPU count pays its restart factor (a changed group is restarted whole,
    as ``colocate serve`` enacts it); for two jobs this is :func:`pair_move_values`.
    """
    names = {j.name for j in members}
    if all(j.current_partner in names for j in members):
        return tuple(values)
    here = (c.gpu_type, c.num_gpus)
    return tuple(v * restart_factor(j, restart_cost_s)
                 if j.is_running and (j.current_gpu_type, j.current_num_gpus) == here else v
                 for j, v in zip(members, values))


def triple_candidates(pairs: set[tuple[int, int]], limit_per_job: int) -> set[tuple[int, int, int]]:
    """Triples ``(i, k, l)`` (ascending) of a candidate pair and a candidate partner of one of its members;
    each job starts at most ``limit_per_job`` triples (its partners' order)."""
    partners: dict[int, list[int]] = {}
    for i, k in sorted(pairs):
        partners.setdefault(i, []).append(k)
        partners.setdefault(k, []).append(i)
    out: set[tuple[int, int, int]] = set()
    for i, mine in partners.items():
        made = 0
        for k in mine:
            for other in partners.get(k, []) + mine:
                if made >= limit_per_job:
                    break
                if other != i and other != k:
                    triple = tuple(sorted((i, k, other)))
                    if triple not in out:
                        out.add(triple)  # type: ignore[arg-type]
                        made += 1
    return out


def all_triples(jobs: Sequence[Job], options: Sequence[JobColumns], configs: Sequence[Configuration]
                ) -> list[tuple[int, int, int]]:
    """Every triple of jobs with a single-node configuration (``pair_candidates="all"``: small rounds only)."""
    from itertools import combinations

    able = [i for i in range(len(jobs)) if any(configs[ci].single_node for ci in options[i].single)]
    return list(combinations(able, 3))


def add_triple_columns(problem: RoundProblem, triples: Sequence[tuple[int, int, int]], options: Sequence[JobColumns],
                       colocation: "ColocationTable", cfg: IlpConfig) -> None:
    """Columns for candidate triples: every common single-node configuration that is not dominated."""
    jobs, configs = problem.jobs, problem.configs
    mem_of = {t.name: t.memory_gb for t in problem.cluster}
    ratio_cache: dict[tuple, tuple[float, float, float] | None] = {}
    new: list[tuple] = []
    for triple in triples:
        members = [jobs[i] for i in triple]
        if any(options[i].pinned for i in triple):
            continue  # a pinned job keeps its configuration and its partner, if any
        common = [ci for ci in options[triple[0]].single
                  if configs[ci].single_node and all(ci in options[i].single for i in triple[1:])]
        kept: dict[str, list[tuple[float, ...]]] = {}
        for ci in sorted(common, key=lambda ci: (configs[ci].gpu_type, configs[ci].num_gpus)):
            c = configs[ci]
            key = (c.gpu_type, *(class_key(j) for j in members))
            if key not in ratio_cache:
                ratio_cache[key] = predicted_triple_ratios(colocation, c.gpu_type, members)
            r = ratio_cache[key]
            if r is None or sum(r) < 1 + cfg.min_benefit:
                continue
            if not group_fits(mem_of[c.gpu_type], [j.requirements.memory_gb for j in members], cfg.context_memory_gb):
                continue
            g = group_move_values(members, c, [options[i].single[ci][0] for i in triple], cfg.restart_cost_s)
            if min(g) <= 0:
                continue
            values = tuple(gi * ri for gi, ri in zip(g, r))
            seen = kept.setdefault(c.gpu_type, [])
            if any(all(p >= v for p, v in zip(prev, values)) for prev in seen):
                continue  # a smaller shape of this type is at least as good for all three
            seen.append(values)
            new.append((triple, ci, values, tuple(options[i].single[ci][1] for i in triple), r))
    problem.add_columns([n[0] for n in new], [n[1] for n in new], [n[2] for n in new], [n[3] for n in new],
                        [n[4] for n in new])


def dual_ranked_triples(problem: RoundProblem, options: Sequence[JobColumns], colocation: "ColocationTable",
                        cfg: IlpConfig, prices: "tuple[np.ndarray, dict[str, float]]",
                        exclude: set[tuple[int, ...]]) -> set[tuple[int, int, int]]:
    """Triples with negative LP reduced cost (pricing for groups of three), top-k per job.

    For a fixed configuration and class triple the predicted ratios are constants, so the reduced cost
    ``Σ_members (w(ρ_x G_xc) − y_x) − n_c μ_t`` separates per member: its minimum takes each class's jobs
    in increasing score (a class that fills two or three places gives them consecutive ranks), and the
    rank-aligned triples are the candidates, as for pairs.
    """
    y, mu = prices
    jobs, configs = problem.jobs, problem.configs
    weight = Objective.of(cfg).member_weight
    classes: dict[tuple, list[int]] = {}
    for i, job in enumerate(jobs):
        if options[i].single and not options[i].pinned:
            classes.setdefault(class_key(job), []).append(i)
    mem = [j.requirements.memory_gb for j in jobs]
    cap_mem = {t.name: t.memory_gb for t in problem.cluster}
    best: dict[int, list[tuple[float, tuple[int, int, int]]]] = {}
    for ci, c in enumerate(configs):
        if not c.single_node:
            continue
        valid = {key: np.array([i for i in ids if ci in options[i].single], dtype=np.int64)
                 for key, ids in classes.items()}
        for combo in combinations_with_replacement(sorted(k for k, v in valid.items() if len(v)), 3):
            found = _rank_aligned(combo, valid, ci, c, colocation, jobs, options, weight, y, mu, cfg)
            for cost, triple in found:
                if not group_fits(cap_mem[c.gpu_type], [mem[i] for i in triple], cfg.context_memory_gb):
                    continue
                if triple in exclude:
                    continue
                for i in triple:
                    best.setdefault(i, []).append((cost, triple))
    out: set[tuple[int, int, int]] = set()
    for found in best.values():
        for _, triple in sorted(found)[:max(cfg.top_k, 1)]:
            out.add(triple)
    return out


def _rank_aligned(combo: tuple, valid: dict, ci: int, c: Configuration, colocation: "ColocationTable",
                  jobs: Sequence[Job], options: Sequence[JobColumns], weight, y: np.ndarray, mu: dict[str, float],
                  cfg: IlpConfig) -> list[tuple[float, tuple[int, int, int]]]:
    """Rank-aligned triples of one class triple on one configuration with negative reduced cost."""
    reps = [jobs[int(valid[k][0])] for k in combo]
    r = predicted_triple_ratios(colocation, c.gpu_type, reps)
    if r is None or sum(r) < 1 + cfg.min_benefit:
        return []
    columns = []
    for pos, key in enumerate(combo):
        ids = valid[key]
        g = np.array([options[i].single[ci][0] for i in ids.tolist()])
        score = weight(g * r[pos]) - y[ids]
        order = np.argsort(score, kind="stable")
        copies, nth = combo.count(key), combo[:pos].count(key)  # a class in several places: interleave ranks
        columns.append((ids[order][nth::copies], score[order][nth::copies]))
    length = min(len(ids) for ids, _ in columns)
    if length == 0:
        return []
    cost = sum(s[:length] for _, s in columns) - c.num_gpus * mu.get(c.gpu_type, 0.0)
    members = np.stack([ids[:length] for ids, _ in columns], axis=1)
    keep = np.nonzero(cost < -1e-9)[0]
    return [(float(cost[n]), tuple(sorted(members[n].tolist()))) for n in keep.tolist()]
