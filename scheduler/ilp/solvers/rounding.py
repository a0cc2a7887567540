"""LP rounding and the greedy fallback: a feasible selection without a solver."""

from __future__ import annotations

import numpy as np

from scheduler.ilp.problem import RoundProblem


def greedy_selection(problem: RoundProblem, lp_values: "np.ndarray | None" = None) -> list[int]:
    """A feasible selection without a solver: pinned jobs first, then the best weight per GPU.

    With ``lp_values`` (an LP relaxation's solution) columns are taken in decreasing LP value first — LP
    rounding, which on these nearly integral LPs lands close to the optimum — and the rest greedily.
    Used as the solver's starting incumbent and when the solver fails; never empty-handed.
    """
    n = problem.num_columns
    if n == 0:
        return []
    pinned_job = np.asarray(problem.pinned, dtype=bool)
    has_pin = pinned_job[problem.member_array(repeat_first=True)].any(axis=1)
    lp = np.zeros(n)
    if lp_values is not None:
        m = min(n, len(lp_values))
        lp[:m] = np.round(np.asarray(lp_values[:m], dtype=float), 6)
    weight = np.asarray(problem.weight, dtype=float)
    per_gpu = weight / np.asarray(problem.gpus, dtype=float)
    # np.lexsort sorts by the last key first: pinned, then LP value (descending), weight per GPU, weight
    order = np.lexsort((weight, per_gpu, -lp, ~has_pin))
    # columns worse than leaving their jobs unallocated are never taken (unless pinned): drop them up front
    order = order[problem.objective.gain(weight[order]) | has_pin[order]].tolist()
    free = {t.name: t.total_gpus for t in problem.cluster}
    type_of_conf = [c.gpu_type for c in problem.configs]
    members, conf, gpus = problem.members, problem.conf, problem.gpus
    taken: set[int] = set()
    chosen: list[int] = []
    for j in order:
        mem = members[j]
        if mem[0] in taken or (len(mem) > 1 and (mem[1] in taken or (len(mem) > 2 and mem[2] in taken))):
            continue
        t = type_of_conf[conf[j]]
        if free[t] < gpus[j]:
            continue
        free[t] -= gpus[j]
        taken.update(mem)
        chosen.append(j)
    return chosen

