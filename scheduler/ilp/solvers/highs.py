"""The HiGHS back-end: the round ILP handed to highspy column-wise in one call, then LP, rounding,
LP-and-fix and branch and bound (see the package docstring)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from scheduler.ilp.config import IlpConfig
from scheduler.ilp.problem import RoundProblem
from scheduler.ilp.solvers.quiet import new_highs
from scheduler.ilp.solvers.rounding import greedy_selection


def highs_available() -> bool:
    try:
        import highspy  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class RawResult:
    """What one solver run returned: a selection (None: no feasible solution), its status words and bound."""

    selected: list[int] | None
    status: str
    proven_optimal: bool
    bound_weight: float | None = None
    num_constraints: int = 0


def constraint_rows(problem: RoundProblem, all_capacity_rows: bool = False
          ) -> tuple[list[list[int]], list[tuple[str, list[int]]]]:
    """Constraint (1) rows (jobs with columns) and constraint (2) rows that can bind (or all of them)."""
    job_cols = problem.job_columns()
    type_cols: dict[str, list[int]] = {}
    for j in range(problem.num_columns):
        type_cols.setdefault(problem.configs[problem.conf[j]].gpu_type, []).append(j)
    binding = _capacity_types(problem, np.asarray(problem.conf, dtype=np.int64), all_capacity_rows)
    return job_cols, [(t, type_cols[t]) for t in binding]


def _capacity_types(problem: RoundProblem, conf: "np.ndarray", all_rows: bool) -> list[str]:
    """GPU types (in order of first column) whose capacity row can bind: the columns' GPUs exceed it."""
    types = problem.cluster.type_names
    type_of_conf = np.array([types.index(c.gpu_type) for c in problem.configs], dtype=np.int64)
    type_of = type_of_conf[conf]
    demand = np.bincount(type_of, weights=np.asarray(problem.gpus, dtype=float), minlength=len(types))
    _, first = np.unique(type_of, return_index=True)
    present = [int(type_of[f]) for f in sorted(first.tolist())]
    return [types[t] for t in present if all_rows or demand[t] > problem.cluster.capacity(types[t])]


def highs_lp(problem: RoundProblem, minimise_form: bool = False, all_capacity_rows: bool = False
             ) -> tuple["Any", dict[int, int], dict[str, int]]:
    """The round ILP as a ``highspy.HighsLp`` (column-wise), with the row of each job and capacity.

    For p < 0 the objective is ``Σ weight·z + λ·|J|`` (minimised; the constant is the offset), for p > 0
    ``Σ v^p·z`` (maximised), so HiGHS's objective, bound and relative gap are those of the natural objective.
    ``minimise_form=True`` gives ``min Σ weight·z`` without offset for any p (used for dual prices).
    """
    import highspy

    n = problem.num_columns
    members = problem.member_array() if n else np.zeros((0, 3), dtype=np.int64)
    conf = np.asarray(problem.conf, dtype=np.int64)
    has_column = np.zeros(len(problem.jobs), dtype=bool)
    has_column[members[members >= 0]] = True
    job_row: dict[int, int] = {}
    row_lower: list[float] = []
    row_upper: list[float] = []
    for i in np.nonzero(has_column)[0].tolist():
        job_row[i] = len(row_lower)
        row_lower.append(1.0 if problem.pinned[i] else -highspy.kHighsInf)
        row_upper.append(1.0)
    cap_row: dict[str, int] = {}
    for t in _capacity_types(problem, conf, all_capacity_rows):
        cap_row[t] = len(row_lower)
        row_lower.append(-highspy.kHighsInf)
        row_upper.append(float(problem.cluster.capacity(t)))
    # column j's entries, in order: its members' job rows, then its type's capacity row (if that row exists);
    # laid out with numpy as a (columns × 4) grid whose unused cells are masked out
    row_of_job = np.full(len(problem.jobs), -1, dtype=np.int64)
    for i, row in job_row.items():
        row_of_job[i] = row
    cap_of_conf = np.array([cap_row.get(c.gpu_type, -1) for c in problem.configs], dtype=np.int64)
    cap = cap_of_conf[conf] if n else np.zeros(0, dtype=np.int64)
    member_rows = np.where(members >= 0, row_of_job[np.maximum(members, 0)], -1)
    grid_index = np.concatenate([member_rows, cap[:, None]], axis=1)
    grid_value = np.concatenate([np.ones((n, 3)), np.asarray(problem.gpus, dtype=float)[:, None]], axis=1)
    used = np.concatenate([members >= 0, (cap >= 0)[:, None]], axis=1)
    starts = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(used.sum(axis=1), out=starts[1:])
    index = grid_index[used]
    value = grid_value[used]
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = len(row_lower)
    costs, offset, maximise = problem.objective.solver_form(np.asarray(problem.weight, dtype=float),
                                                            len(problem.jobs), minimise_form)
    lp.col_cost_ = costs
    lp.offset_ = offset
    lp.sense_ = highspy.ObjSense.kMaximize if maximise else highspy.ObjSense.kMinimize
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.ones(n)
    lp.row_lower_ = np.asarray(row_lower, dtype=float)
    lp.row_upper_ = np.asarray(row_upper, dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = starts
    lp.a_matrix_.index_ = index.astype(np.int32)
    lp.a_matrix_.value_ = value.astype(float)
    return lp, job_row, cap_row



SMALL_ROUND_COLUMNS = 5000  # rounds up to this many variables are solved to a 0.01 % gap whatever mip_gap says


def _run_from(h: Any, start: Sequence[int]) -> None:
    """Solve the model in ``h`` with the 0/1 selection ``start`` handed to HiGHS as its first incumbent."""
    import highspy

    guess = highspy.HighsSolution()
    values = np.zeros(h.getNumCol())
    values[list(start)] = 1.0
    guess.col_value = values
    h.setSolution(guess)
    h.run()


def _model(problem: RoundProblem, cfg: IlpConfig) -> tuple[Any, int]:
    """A HiGHS instance holding the round ILP (natural objective), and its number of rows."""

    lp, _, _ = highs_lp(problem)
    h = new_highs(cfg.threads)
    h.passModel(lp)
    # the MIPs here start from an incumbent (LP rounding); feasibility jump, run before the root LP of every
    # MIP, would cost ~3 ms of a ~4 ms solve of a 100-column round without improving that start
    h.setOptionValue("mip_heuristic_run_feasibility_jump", False)
    return h, lp.num_row_


def _lp_relaxation(problem: RoundProblem, cfg: IlpConfig) -> tuple[Any, "np.ndarray | None", float | None, int]:
    """(HiGHS instance or None, LP values, LP optimum in minimisation form, rows): reused from pricing when
    that LP covers every column, else solved here."""
    import highspy

    n = problem.num_columns
    num_rows = len({i for m in problem.members for i in m}) + len({problem.configs[c].gpu_type for c in problem.conf})
    if problem.lp_values is not None and len(problem.lp_values) == n and problem.lp_weight is not None:
        return None, problem.lp_values, problem.lp_weight, num_rows
    h, num_rows = _model(problem, cfg)
    h.setOptionValue("time_limit", float(cfg.time_limit_s))
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return h, None, None, num_rows
    weight = problem.objective.to_weights(h.getInfo().objective_function_value, len(problem.jobs))
    return h, np.asarray(h.getSolution().col_value), weight, num_rows


def _lp_and_fix(h: Any, problem: RoundProblem, cfg: IlpConfig, lp_values: "np.ndarray", start: list[int],
                time_left: float) -> list[int] | None:
    """Keep the columns the LP sets to 1, solve the small rest exactly; the selection found, or None."""
    n = problem.num_columns
    fixed = np.nonzero(lp_values > 1 - 1e-6)[0]
    busy = {i for j in fixed for i in problem.members[j]}
    blocked = [j for j in range(n) if lp_values[j] <= 1 - 1e-6 and any(i in busy for i in problem.members[j])]
    h.changeColsBounds(len(fixed), fixed.astype(np.int32), np.ones(len(fixed)), np.ones(len(fixed)))
    if blocked:
        h.changeColsBounds(len(blocked), np.asarray(blocked, dtype=np.int32), np.zeros(len(blocked)),
                           np.zeros(len(blocked)))
    h.setOptionValue("presolve", "on")  # removes the fixed part; what is left is small
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("time_limit", max(time_left / 3, 0.01))
    _run_from(h, start)
    found = None
    if h.getInfo().primal_solution_status == 2:
        found = [int(j) for j in np.nonzero(np.asarray(h.getSolution().col_value) > 0.5)[0]]
    h.changeColsBounds(n, np.arange(n, dtype=np.int32), np.zeros(n), np.ones(n))
    return found


def _branch_and_bound(h: Any, problem: RoundProblem, cfg: IlpConfig, start: list[int], time_left: float,
                      num_rows: int) -> RawResult:
    """Branch and bound on everything, starting from the best selection so far."""
    import highspy

    h.setOptionValue("time_limit", max(time_left, 0.01))
    h.setOptionValue("mip_rel_gap", float(cfg.mip_gap))
    # presolve costs more than it saves on these assignment-shaped models (1.5 s vs 0.6 s at 1,000 jobs):
    # the root LP is nearly integral and HiGHS's rounding closes the gap from there
    h.setOptionValue("presolve", "off")
    # the cheap rounding heuristics find near-optimal incumbents from that LP (300 jobs: 0.14 s vs 1.2 s
    # spent in sub-MIPs without them)
    h.setOptionValue("mip_heuristic_run_zi_round", True)
    h.setOptionValue("mip_heuristic_run_shifting", True)
    _run_from(h, start)
    model_status = h.getModelStatus()
    status = h.modelStatusToString(model_status)
    info = h.getInfo()
    bound = None
    if math.isfinite(info.mip_dual_bound):
        bound = problem.objective.to_weights(info.mip_dual_bound, len(problem.jobs))
    if info.primal_solution_status != 2:  # 2 = feasible (kSolutionStatusFeasible)
        return RawResult(None, status, False, bound, num_rows)
    values = np.asarray(h.getSolution().col_value)
    selected = [int(j) for j in np.nonzero(values > 0.5)[0]]
    return RawResult(selected, status, model_status == highspy.HighsModelStatus.kOptimal, bound, num_rows)


def solve_highspy(problem: RoundProblem, cfg: IlpConfig) -> RawResult:
    """HiGHS through highspy, the matrix passed in one call (column-wise, from numpy arrays).

    This is the model ``pulp.HiGHS`` would build, without its per-variable Python calls (≈1.5 s at 1,000
    jobs on the dev machine, more than the solve itself). The constant ``λ·|J|`` goes in as the objective
    offset so the relative gap HiGHS enforces is the gap of the natural objective. Stages: the LP
    relaxation; its rounding, accepted within the gap of the LP bound; LP-and-fix, likewise; else branch
    and bound from the best selection so far.
    """
    import highspy

    n = problem.num_columns
    started = time.perf_counter()
    if n <= SMALL_ROUND_COLUMNS:  # small rounds are cheap to solve (nearly) exactly: do that
        cfg = replace(cfg, mip_gap=min(cfg.mip_gap, 1e-4))
    objective, num_jobs = problem.objective, len(problem.jobs)
    h, lp_values, lp_weight, num_rows = _lp_relaxation(problem, cfg)
    start = greedy_selection(problem, lp_values)
    if lp_weight is not None:
        rounded = sum(problem.weight[j] for j in start)
        if objective.close_enough(rounded, lp_weight, num_jobs, cfg.mip_gap):
            return RawResult(start, "Optimal (LP rounding within gap)", True, lp_weight, num_rows)
    if problem.reserved is not None and problem.reserved.num_left:
        problem.release_reserved()  # branching needs every column; the LP bound above already covers them
        h = None
    n = problem.num_columns
    if lp_values is not None and len(lp_values) < n:
        lp_values = np.r_[lp_values, np.zeros(n - len(lp_values))]
    if h is None:
        h, num_rows = _model(problem, cfg)
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), [highspy.HighsVarType.kInteger] * n)
    if lp_values is not None and lp_weight is not None:
        time_left = float(cfg.time_limit_s) - (time.perf_counter() - started)
        fixed_sel = _lp_and_fix(h, problem, cfg, lp_values, start, time_left)
        if fixed_sel is not None:
            fixed_weight = sum(problem.weight[j] for j in fixed_sel)
            if fixed_weight < sum(problem.weight[j] for j in start):
                start = fixed_sel
            if objective.close_enough(fixed_weight, lp_weight, num_jobs, cfg.mip_gap):
                return RawResult(fixed_sel, "Optimal (LP-and-fix within gap)", True, lp_weight, num_rows)
    time_left = float(cfg.time_limit_s) - (time.perf_counter() - started)
    return _branch_and_bound(h, problem, cfg, start, time_left, num_rows)
