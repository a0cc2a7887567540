"""Solving a built problem: the pricing stage, then a back-end from the registry, then the checks and the
fallbacks (best incumbent, else greedy), then the decision."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from scheduler.ilp.build import gc_paused
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.pricing import price_pair_columns
from scheduler.ilp.problem import InvalidSelection, RoundProblem
from scheduler.ilp.solvers.highs import RawResult, highs_available, solve_highspy
from scheduler.ilp.solvers.pulp_backend import solve_pulp
from scheduler.ilp.solvers.rounding import greedy_selection
from scheduler.ilp.warm import WarmStart
from scheduler.model.policy import Allocation, RoundDecision, SolverInfo


@dataclass(frozen=True)
class Solution:
    selected: tuple[int, ...]
    info: SolverInfo


SOLVER_NAMES = {"highs": "HiGHS", "pulp-highs": "HiGHS (PuLP)", "cbc": "CBC (PuLP)"}

# The back-ends by IlpConfig.solver name: (problem, config) -> RawResult.
BACKENDS: dict[str, Callable[[RoundProblem, IlpConfig], RawResult]] = {
    "highs": solve_highspy,
    "pulp-highs": lambda problem, cfg: solve_pulp(problem, cfg, "pulp-highs"),
    "cbc": lambda problem, cfg: solve_pulp(problem, cfg, "cbc"),
}


def solve_problem(problem: RoundProblem, cfg: IlpConfig = IlpConfig(), warm: WarmStart | None = None) -> Solution:
    """Price, then solve the round ILP; fall back to CBC, then to the greedy selection. Never raises for
    solver trouble.

    Stage 1, pricing (:func:`scheduler.ilp.pricing.price_pair_columns`, at most a third of
    ``cfg.time_limit_s``), is the only one that adds columns. Stage 2 hands the columns to
    ``cfg.solver``: "highs" (highspy, default), "pulp-highs" (the same solver through PuLP's interface) or
    "cbc" (PuLP's bundled CBC). If HiGHS is missing or errors, CBC is tried; if no solver returns a valid
    selection (e.g. the time limit struck before the first incumbent), :func:`greedy_selection` is used
    and ``SolverInfo.fallback`` says so. ``warm`` (kept by a policy across rounds) starts pricing's LP
    from the previous round's basis and records this round's (:mod:`scheduler.ilp.warm`).
    """
    with gc_paused():
        started = time.perf_counter()
        if problem.num_columns and problem.pricing is not None and highs_available():
            price_pair_columns(problem, cfg, deadline=started + cfg.time_limit_s / 3, warm=warm)
            problem.pricing_time_s = time.perf_counter() - started
            cfg = replace(cfg, time_limit_s=max(cfg.time_limit_s - problem.pricing_time_s, 0.05))
        return _solve_columns(problem, cfg, started)


def _run_chain(problem: RoundProblem, cfg: IlpConfig) -> tuple[RawResult | None, str, list[str]]:
    """The first back-end of the chain that runs without an error: (its result, its name, the errors)."""
    chain = [cfg.solver] if cfg.solver == "cbc" else [cfg.solver, "cbc"]
    if not highs_available():
        chain = ["cbc"]
    errors: list[str] = []
    for backend in chain:
        if backend != "highs" and problem.reserved is not None:
            problem.release_reserved()  # only the HiGHS path prices held-back singles in
        try:
            return BACKENDS[backend](problem, cfg), backend, errors
        except Exception as err:  # noqa: BLE001 - a broken solver install must not break the round
            errors.append(f"{backend}: {type(err).__name__}: {err}".split("\n")[0])
    return None, chain[-1], errors


def _solve_columns(problem: RoundProblem, cfg: IlpConfig, started: float) -> Solution:
    if problem.num_columns == 0:
        objective = problem.value_of([])
        return Solution((), SolverInfo("none", "Empty", objective, 0.0, objective, 0.0))
    result, used, errors = _run_chain(problem, cfg)
    selected = result.selected if result is not None else None
    fallback: str | None = None
    if selected is not None:
        try:
            problem.check(selected)
        except InvalidSelection:
            selected = None
        else:
            if not result.proven_optimal:  # type: ignore[union-attr]
                fallback = "incumbent"
    if selected is None:
        selected = greedy_selection(problem)
        fallback = "greedy"
    objective = problem.value_of(selected)
    bound = None
    if result is not None and result.bound_weight is not None:
        bound = problem.objective_from_weights(result.bound_weight)
    gap = abs(objective - bound) / max(abs(objective), 1e-9) if bound is not None else None
    status = result.status if result is not None else "; ".join(errors) or "Error"
    info = SolverInfo(name=SOLVER_NAMES.get(used, used), status=status, objective=objective,
                      time_s=time.perf_counter() - started, bound=bound, gap=gap, fallback=fallback,
                      num_variables=problem.num_columns,
                      num_constraints=result.num_constraints if result is not None else 0)
    return Solution(tuple(sorted(selected)), info)


def decision_from(problem: RoundProblem, solution: Solution) -> RoundDecision:
    """Turn selected columns into a :class:`RoundDecision` (expected goodput includes co-location ratios)."""
    allocations: list[Allocation] = []
    placed: set[int] = set()
    for j in solution.selected:
        c = problem.configs[problem.conf[j]]
        mem = problem.members[j]
        for pos, i in enumerate(mem):
            est = problem.estimates[j][pos]
            goodput = est.goodput
            others = tuple(problem.jobs[k].name for k in mem if k != i)
            if others:
                goodput = est.goodput * problem.ratios[j][pos]
            allocations.append(Allocation(job=problem.jobs[i].name, gpu_type=c.gpu_type, num_gpus=problem.gpus[j],
                                          batch_size=int(est.batch_size), partner=others[0] if others else None,
                                          expected_goodput=float(goodput), num_nodes=c.num_nodes,
                                          partners=others if len(others) > 1 else ()))
            placed.add(i)
    unallocated = tuple(job.name for i, job in enumerate(problem.jobs) if i not in placed)
    return RoundDecision(tuple(allocations), unallocated, solution.info.objective, solution.info)
