"""Groups of three jobs on one GPU set (``IlpConfig.max_group_size=3``).

Ratios: a table of measured triples is not available yet (the profiler's triple cells have not been run at
scale), so a triple's ratios are *predicted* from its three pairs by adding slowdowns: for member ``x``
with others ``y`` and ``z``, ``1/ρ_x = 1 + (1/ρ_x|y − 1) + (1/ρ_x|z − 1)`` — each partner adds the
slowdown it causes alone. Plain time-slicing (ρ = 1/2 in every pair) gives ρ = 1/3 each, as it should;
a triple is known only when all three pairs are measured (or predicted) with positive ratios.

Columns: seeded from the pair candidates (a triple whose three members include a candidate pair and a
candidate partner of one of them), on every common single-node configuration, with memory for three,
``Σ ρ ≥ 1 + β``, and the move rule of :func:`group_move_values`. Pricing does not generate triples: the
triples in the ILP are the seeded ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from scheduler.configs import Configuration
from scheduler.ilp.columns import JobColumns, restart_factor
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.problem import RoundProblem
from scheduler.jobs import Job

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.colocation import ColocationTable


def predicted_triple_ratios(colocation: "ColocationTable", gpu_type: str, jobs: Sequence[Job]
                            ) -> tuple[float, float, float] | None:
    """Each member's ratio in a group of three, predicted from the pairs by adding slowdowns; None if unknown."""
    out = []
    for n, x in enumerate(jobs):
        slowdown = 1.0
        for m, other in enumerate(jobs):
            if m == n:
                continue
            r = colocation.lookup(gpu_type, x, other)
            if r is None or r[0] <= 0:
                return None
            slowdown += 1.0 / r[0] - 1.0
        out.append(1.0 / slowdown)
    return out[0], out[1], out[2]


def group_move_values(members: Sequence[Job], c: Configuration, values: Sequence[float], restart_cost_s: float
                      ) -> tuple[float, ...]:
    """Members' normalised goodputs on ``c`` after the moves that forming the group costs.

    Unless the members already run as one group (each names another member as its current partner), every
    member running now on c's type and GPU count except the one of highest ``G`` (the first on a tie) moves
    onto the others' GPUs and pays its restart factor; for two jobs this is :func:`pair_move_values`.
    """
    names = {j.name for j in members}
    if all(j.current_partner in names for j in members):
        return tuple(values)
    here = (c.gpu_type, c.num_gpus)
    on = [n for n, j in enumerate(members) if j.is_running and (j.current_gpu_type, j.current_num_gpus) == here]
    if len(on) < 2:
        return tuple(values)
    stay = max(on, key=lambda n: (values[n], -n))
    return tuple(v * restart_factor(members[n], restart_cost_s) if n in on and n != stay else v
                 for n, v in enumerate(values))


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
            for l in partners.get(k, []) + mine:
                if made >= limit_per_job:
                    break
                if l != i and l != k:
                    triple = tuple(sorted((i, k, l)))
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
            key = (c.gpu_type, *((j.application, j.job_type) for j in members))
            if key not in ratio_cache:
                ratio_cache[key] = predicted_triple_ratios(colocation, c.gpu_type, members)
            r = ratio_cache[key]
            if r is None or sum(r) < 1 + cfg.min_benefit:
                continue
            mem = [j.memory_gb for j in members]
            if all(m is not None for m in mem) and sum(mem) + 3 * cfg.context_memory_gb > mem_of[c.gpu_type]:
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
