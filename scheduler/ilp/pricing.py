"""Pricing (column generation) as an explicit stage: LP relaxation, duals, pairs of negative reduced cost.

:func:`price_pair_columns` runs between building and solving (:func:`scheduler.ilp.solve.solve_round`);
it is the only stage after the build that adds columns to a :class:`RoundProblem`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from scheduler.ilp.candidates import class_key
from scheduler.ilp.columns import JobColumns, add_pair_columns
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.objective import Objective, beneficial_ratio
from scheduler.ilp.problem import RoundProblem
from scheduler.ilp.solvers.highs import highs_lp
from scheduler.ilp.solvers.quiet import new_highs
from scheduler.ilp.triples import add_triple_columns, dual_ranked_triples
from scheduler.model.configs import Configuration
from scheduler.model.memory import group_fits

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.ilp.warm import WarmStart
    from scheduler.model.colocation import ColocationTable


@dataclass
class PricingData:
    """What pricing needs beyond the columns: per-job options, the class graph, the table."""

    options: Sequence[JobColumns]
    graph: Any
    colocation: "ColocationTable | None"
    plan: list[tuple] | None = None
    flat: Any = None        # _FlatPlan of plan, built at the round's first pricing pass


def _pricing_plan(problem: RoundProblem, options: Sequence[JobColumns], configs: tuple[Configuration, ...],
                  colocation: "ColocationTable", graph: "Any", cfg: IlpConfig) -> list[tuple]:
    """What pricing loops over, computed once per round: per (class pair, single-node configuration) the
    ratios and the member jobs valid there (ids ascending) with their normalised goodputs."""
    data = problem.pricing
    if data is not None and data.plan is not None:
        return data.plan
    jobs = problem.jobs
    class_of: dict[tuple, list[int]] = {}
    for i, job in enumerate(jobs):
        if options[i].single and not options[i].pinned:
            class_of.setdefault(class_key(job), []).append(i)
    single_node = [ci for ci, c in enumerate(configs) if c.single_node]
    members_at: dict[tuple[tuple, int], tuple["np.ndarray", "np.ndarray"]] = {}
    for key, members in class_of.items():
        for ci in single_node:
            ids = [i for i in members if ci in options[i].single]
            if ids:
                members_at[(key, ci)] = (np.array(ids, dtype=int),
                                         np.array([options[i].single[ci][0] for i in ids]))
    plan: list[tuple] = []
    for a_key, b_key in graph.edges:
        if a_key not in class_of or b_key not in class_of:
            continue
        rep_a, rep_b = jobs[class_of[a_key][0]], jobs[class_of[b_key][0]]
        ratios: dict[str, tuple[float, float] | None] = {}
        for ci in single_node:
            c = configs[ci]
            r = beneficial_ratio(colocation, ratios, c.gpu_type, rep_a, rep_b, cfg.min_benefit)
            if r is None:
                continue
            got_a, got_b = members_at.get((a_key, ci)), members_at.get((b_key, ci))
            if got_a is None or got_b is None:
                continue
            plan.append((a_key, b_key, ci, r, got_a[0], got_a[1], got_b[0], got_b[1]))
    if data is not None:
        data.plan = plan
    return plan




@dataclass(frozen=True)
class _FlatPlan:
    """The pricing plan laid out flat, so one pass scores every (class pair, configuration) entry at once.

    Side A holds each entry's A members (entries contiguous, in plan order, ids ascending inside one),
    side B the B members of entries whose classes differ. The member weights ``w(ρ G)`` do not depend on
    the duals, so they are computed once per round: ``a_w0``/``a_w1`` are an A member's weight with the
    entry's first/second ratio (a same-class pair costs its lower index with the first), ``b_w`` a B
    member's with the second. Computed on arrays as the per-entry loop did (numpy's power is elementwise,
    the same bits in any array), so every reduced cost is the same float.
    """

    a_job: np.ndarray
    a_entry: np.ndarray
    a_w0: np.ndarray
    a_w1: np.ndarray
    a_start: np.ndarray     # per entry: first A position
    b_job: np.ndarray
    b_entry: np.ndarray
    b_w: np.ndarray
    b_start: np.ndarray     # per entry: first B position (-1: same class)
    count_a: np.ndarray
    count_b: np.ndarray
    same: np.ndarray        # bool per entry
    gpus: np.ndarray        # per entry: the configuration's GPUs
    type_of: np.ndarray     # per entry: index of its GPU type in cluster.type_names


def _flat_plan(problem: RoundProblem, plan: list[tuple], weight: Any) -> _FlatPlan:
    """:class:`_FlatPlan` of ``plan`` (kept on ``problem.pricing`` for the round's later passes)."""
    data = problem.pricing
    if data is not None and data.flat is not None:
        return data.flat
    types = {name: n for n, name in enumerate(problem.cluster.type_names)}
    count_a = np.array([len(e[4]) for e in plan], dtype=np.int64)
    same = np.array([e[0] == e[1] for e in plan], dtype=bool)
    count_b = np.where(same, 0, np.array([len(e[6]) for e in plan], dtype=np.int64))
    entries = np.arange(len(plan), dtype=np.int64)
    empty = np.zeros(0)
    a_g = np.concatenate([e[5] for e in plan]) if plan else empty
    b_g = np.concatenate([e[7] for e in plan if e[0] != e[1]] or [empty])
    r0 = np.array([e[3][0] for e in plan], dtype=float)
    r1 = np.array([e[3][1] for e in plan], dtype=float)
    a_entry, b_entry = np.repeat(entries, count_a), np.repeat(entries, count_b)
    flat = _FlatPlan(
        a_job=np.concatenate([e[4] for e in plan]).astype(np.int64) if plan else np.zeros(0, dtype=np.int64),
        a_entry=a_entry, a_w0=np.asarray(weight(a_g * r0[a_entry]), dtype=float),
        a_w1=np.asarray(weight(a_g * r1[a_entry]), dtype=float), a_start=np.cumsum(count_a) - count_a,
        b_job=np.concatenate([e[6] for e in plan if e[0] != e[1]] or [np.zeros(0, dtype=np.int64)]).astype(np.int64),
        b_entry=b_entry, b_w=np.asarray(weight(b_g * r1[b_entry]), dtype=float),
        b_start=np.where(same, -1, np.cumsum(count_b) - count_b), count_a=count_a, count_b=count_b, same=same,
        gpus=np.array([problem.configs[e[2]].num_gpus for e in plan], dtype=np.int64),
        type_of=np.array([types[problem.configs[e[2]].gpu_type] for e in plan], dtype=np.int64))
    if data is not None:
        data.flat = flat
    return flat


def _ranks(count: np.ndarray) -> np.ndarray:
    """0, 1, ..., count[e] − 1 for each entry e in turn."""
    total = int(count.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)


def dual_ranked_partners(problem: RoundProblem, options: Sequence[JobColumns], configs: tuple[Configuration, ...],
                         colocation: "ColocationTable", graph: "object", cfg: IlpConfig,
                         prices: "tuple[np.ndarray, dict[str, float]]",
                         exclude: "set[tuple[int, ...]] | None" = None) -> set[tuple[int, int]]:
    """Top-k partners per job with negative LP reduced cost (pricing for column generation).

    With duals ``y_i`` (jobs) and ``μ_t`` (capacity), the reduced cost of pair (i, k, c) is
    ``w(ρ_i G_ic) − y_i + w(ρ_k G_kc) − y_k − n_c μ_t`` (``w`` = the column weight of one member). For a
    fixed configuration and pair of classes (A, B) the ratios are fixed, so it separates into
    ``a_i + b_k + const``: the best pairs match A's jobs sorted by ``a`` with B's sorted by ``b``, rank
    by rank (any matching of the best ranks is equally good, and rank alignment keeps them disjoint).
    That costs a sort per (configuration, class pair) instead of a pass over all job pairs — done here
    for every entry of the round's plan at once (:class:`_FlatPlan`). Each job then keeps its ``top_k``
    partners of most negative reduced cost. Because the minimum of ``a_i + b_k`` is always a rank-aligned
    pair, an empty answer proves no pair column anywhere has negative reduced cost: iterating this to the
    end solves the all-pairs LP relaxation exactly.
    """
    y, mu = prices
    weight = Objective.of(cfg).member_weight
    plan = _pricing_plan(problem, options, configs, colocation, graph, cfg)
    flat = _flat_plan(problem, plan, weight)
    mu_t = np.array([mu.get(t, 0.0) for t in problem.cluster.type_names], dtype=float)
    const = -flat.gpus * mu_t[flat.type_of]
    # each entry's members in increasing score, ties in id order (a stable sort per entry, as one lexsort)
    score_a = flat.a_w0 - y[flat.a_job]
    order_a = np.lexsort((score_a, flat.a_entry))
    job_a, score_a = flat.a_job[order_a], score_a[order_a]
    score_b = flat.b_w - y[flat.b_job]
    order_b = np.lexsort((score_b, flat.b_entry))
    job_b, score_b = flat.b_job[order_b], score_b[order_b]
    # different classes: rank r of A with ranks r and r+1 of B (two partners each, still nearly disjoint)
    diff = np.nonzero(~flat.same)[0]
    m = np.minimum(flat.count_a[diff], flat.count_b[diff])
    e1, e2 = np.repeat(diff, m), np.repeat(diff, np.maximum(m - 1, 0))
    pa1, pb1 = flat.a_start[e1] + _ranks(m), flat.b_start[e1] + _ranks(m)
    pa2 = flat.a_start[e2] + _ranks(np.maximum(m - 1, 0))
    pb2 = flat.b_start[e2] + _ranks(np.maximum(m - 1, 0)) + 1
    # same class: neighbouring ranks (0,1), (1,2), ...; a table may give the two copies of one job type
    # different ratios (the column's first member, the lower index, gets ratio_a): cost each pair with its
    # real orientation
    sc = np.nonzero(flat.same)[0]
    n_sc = np.maximum(flat.count_a[sc] - 1, 0)
    e3 = np.repeat(sc, n_sc)
    left_pos = flat.a_start[e3] + _ranks(n_sc)
    left, right = job_a[left_pos], job_a[left_pos + 1]
    lo_first = left < right
    lo_pos = order_a[np.where(lo_first, left_pos, left_pos + 1)]
    hi_pos = order_a[np.where(lo_first, left_pos + 1, left_pos)]
    lo, hi = np.minimum(left, right), np.maximum(left, right)
    cost3 = flat.a_w0[lo_pos] - y[lo] + flat.a_w1[hi_pos] - y[hi] + const[e3]
    left_all = np.concatenate([job_a[pa1], job_a[pa2], lo])
    right_all = np.concatenate([job_b[pb1], job_b[pb2], hi])
    cost = np.concatenate([score_a[pa1] + score_b[pb1] + const[e1], score_a[pa2] + score_b[pb2] + const[e2], cost3])
    entry = np.concatenate([e1, e2, e3])
    keep = cost < -1e-9
    return _top_partners(problem, cfg, left_all[keep].tolist(), right_all[keep].tolist(), cost[keep].tolist(),
                         flat.type_of[entry[keep]].tolist(), exclude)


def _top_partners(problem: RoundProblem, cfg: IlpConfig, left: list[int], right: list[int], cost: list[float],
                  type_of: list[int], exclude: "set[tuple[int, ...]] | None") -> set[tuple[int, int]]:
    """Each job's ``top_k`` partners of most negative reduced cost among the pairs found (memory-feasible,
    not excluded), as sorted index pairs. The answer depends only on the pairs found, not their order."""
    mem = [j.requirements.memory_gb for j in problem.jobs]
    cap_mem = [t.memory_gb for t in problem.cluster]
    best: dict[int, list[tuple[float, int]]] = {}
    for i, k, value, t in zip(left, right, cost, type_of):
        if exclude is not None and (min(i, k), max(i, k)) in exclude:
            continue  # already a candidate: do not let it use up one of the job's top-k slots
        if not group_fits(cap_mem[t], (mem[i], mem[k]), cfg.context_memory_gb):
            continue
        best.setdefault(i, []).append((value, k))
        best.setdefault(k, []).append((value, i))
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


def price_reserved_singles(problem: RoundProblem, y: np.ndarray, mu: dict[str, float], per_job: int = 2
                           ) -> np.ndarray:
    """Held-back singles with negative reduced cost ``w_ic − y_i − n_c μ_t``: per job its ``per_job`` most
    negative (indices into ``problem.reserved``)."""
    res = problem.reserved
    if res is None or res.num_left == 0:
        return np.zeros(0, dtype=np.int64)
    mu_t = np.array([mu.get(t, 0.0) for t in problem.cluster.type_names])
    reduced = res.weight - y[res.job] - res.gpus * mu_t[res.type_of]
    found = np.nonzero((reduced < -1e-9) & ~res.released)[0]
    if not len(found):
        return found
    order = found[np.lexsort((reduced[found], res.job[found]))]
    job = res.job[order]
    starts = np.r_[0, np.nonzero(np.diff(job))[0] + 1]
    position = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    return order[position < per_job]


def _append_to_lp(h: Any, problem: RoundProblem, new: range, job_row: dict[int, int], cap_row: dict[str, int]) -> None:
    """Add the problem's columns ``new`` to the HiGHS LP in ``h`` (warm start: the basis is kept)."""
    starts, index, value = [0], [], []
    for j in new:
        for i in problem.members[j]:
            index.append(job_row[i])
            value.append(1.0)
        index.append(cap_row[problem.configs[problem.conf[j]].gpu_type])
        value.append(float(problem.gpus[j]))
        starts.append(len(index))
    h.addCols(len(new), np.asarray([problem.weight[j] for j in new], dtype=float), np.zeros(len(new)),
              np.ones(len(new)), len(index), np.asarray(starts[:-1], dtype=np.int32),
              np.asarray(index, dtype=np.int32), np.asarray(value, dtype=float))


def _lp_model(problem: RoundProblem) -> tuple[Any, dict[int, int], dict[str, int]]:
    """The LP relaxation in minimisation form in a HiGHS instance, with a capacity row for every type."""
    import highspy

    lp, job_row, cap_row = highs_lp(problem, minimise_form=True, all_capacity_rows=True)
    h = new_highs(threads=1)
    h.passModel(lp)
    for t in problem.cluster.type_names:  # types without any column get a row too, so new columns can reference it
        if t not in cap_row:
            cap_row[t] = h.getNumRow()
            h.addRow(-highspy.kHighsInf, float(problem.cluster.capacity(t)), 0, np.array([], dtype=np.int32),
                     np.array([], dtype=float))
    return h, job_row, cap_row


def price_pair_columns(problem: RoundProblem, cfg: IlpConfig, deadline: float | None = None,
                       warm: "WarmStart | None" = None) -> int:
    """Column generation on the LP relaxation: add priced-in columns to ``problem``; returns the pair passes.

    Each pass solves the LP (warm-started: new columns are appended to the same HiGHS model), reads the
    row duals, and adds held-back singles (:func:`price_reserved_singles`) and, for the first
    ``cfg.pricing_passes`` passes, pairs (:func:`dual_ranked_partners`) of negative reduced cost. It stops
    when nothing is added (the LP then equals the LP over every single and the pairs so far; with no pass
    limit, the all-pairs LP relaxation) or at ``deadline`` (``time.perf_counter()`` seconds), when any
    singles still held back are all added. The last LP solved is the round's LP bound and rounding start.
    With ``warm`` (the state the previous round left), the first LP starts from that round's basis mapped
    onto this one, and this round's final basis and groups are recorded in ``warm`` for the next.
    """
    import highspy

    data = problem.pricing
    if data is None or problem.num_columns == 0:
        return 0
    h, job_row, cap_row = _lp_model(problem)
    if warm is not None and cfg.warm_start:
        problem.warm_started = warm.apply_basis(h, problem, job_row, cap_row)
    seen: set[tuple[int, ...]] = {m for m in problem.members if len(m) >= 2}
    pair_passes, solved = 0, False
    while not (deadline is not None and time.perf_counter() > deadline):
        h.run()
        problem.lp_iterations += int(h.getInfo().simplex_iteration_count)
        solved = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
        if not solved:
            break
        solution = h.getSolution()
        problem.lp_values = np.asarray(solution.col_value)
        problem.lp_weight = float(h.getInfo().objective_function_value)
        duals = np.asarray(solution.row_dual)
        y = np.zeros(len(problem.jobs))
        for i, row in job_row.items():
            y[i] = duals[row]
        mu = {t: float(duals[row]) for t, row in cap_row.items()}
        first = problem.num_columns
        problem.release_reserved(price_reserved_singles(problem, y, mu))
        if data.graph is not None and data.colocation is not None and pair_passes < cfg.pricing_passes:
            pair_passes += 1
            fresh = dual_ranked_partners(problem, data.options, problem.configs, data.colocation, data.graph, cfg,
                                         prices=(y, mu), exclude=seen) - seen
            fresh = {pair for pair in fresh if pair[0] in job_row and pair[1] in job_row}
            seen |= fresh
            add_pair_columns(problem, sorted(fresh), data.options, data.colocation, cfg)
            problem.num_group_candidates += len(fresh)
            if cfg.max_group_size >= 3:
                trios = dual_ranked_triples(problem, data.options, data.colocation, cfg, (y, mu), seen)
                seen |= trios
                add_triple_columns(problem, sorted(trios), data.options, data.colocation, cfg)
                problem.num_group_candidates += len(trios)
        if problem.num_columns == first:
            break  # nothing priced in: this LP is the round's LP
        _append_to_lp(h, problem, range(first, problem.num_columns), job_row, cap_row)
        solved = False
    if not solved and problem.reserved is not None and problem.reserved.num_left:
        first = problem.num_columns  # stopped early: every held-back single joins, the LP is solved once more
        _append_to_lp(h, problem, problem.release_reserved(), job_row, cap_row)
    if not solved and problem.lp_values is not None:
        h.run()  # warm start: the LP over the final columns, for rounding and as the round's bound
        problem.lp_iterations += int(h.getInfo().simplex_iteration_count)
        if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
            problem.lp_values = np.asarray(h.getSolution().col_value)
            problem.lp_weight = float(h.getInfo().objective_function_value)
        else:
            problem.lp_weight = None
    problem.pricing_passes = pair_passes
    if warm is not None and cfg.warm_start and problem.lp_weight is not None:
        warm.remember(h, problem, job_row, cap_row)
    return pair_passes
