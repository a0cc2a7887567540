"""The PuLP back-ends: CBC (the fallback) and HiGHS through PuLP's interface, on the same model."""

from __future__ import annotations

import math

from scheduler.ilp.config import IlpConfig
from scheduler.ilp.problem import RoundProblem
from scheduler.ilp.solvers.highs import RawResult, constraint_rows
from scheduler.ilp.solvers.quiet import native_stdout_to_devnull


def solve_pulp(problem: RoundProblem, cfg: IlpConfig, backend: str) -> RawResult:
    """The same model through PuLP: ``backend`` "cbc" (PULP_CBC_CMD) or "pulp-highs" (pulp.HiGHS)."""
    import pulp

    n = problem.num_columns
    job_cols, capacity = constraint_rows(problem)
    prob = pulp.LpProblem("colocate_round", pulp.LpMinimize)
    xs = [prob.add_variable(f"z{j}", 0, 1, cat=pulp.LpBinary) for j in range(n)]
    prob.setObjective(pulp.LpAffineExpression(zip(xs, problem.weight)))
    for i, cols in enumerate(job_cols):
        if cols:
            expr = pulp.LpAffineExpression((xs[j], 1) for j in cols)
            sense = pulp.LpConstraintEQ if problem.pinned[i] else pulp.LpConstraintLE
            prob.addConstraint(pulp.LpConstraint(expr, sense=sense, rhs=1), name=f"job{i}")
    for t, cols in capacity:
        expr = pulp.LpAffineExpression((xs[j], problem.gpus[j]) for j in cols)
        prob.addConstraint(pulp.LpConstraint(expr, sense=pulp.LpConstraintLE, rhs=problem.cluster.capacity(t)),
                           name=f"cap_{t}")
    num_rows = sum(1 for cols in job_cols if cols) + len(capacity)
    if backend == "pulp-highs":
        solver = pulp.HiGHS(msg=False, timeLimit=cfg.time_limit_s, gapRel=cfg.mip_gap, threads=cfg.threads,
                            presolve="off")
    else:
        solver = _cbc(cfg)
    with native_stdout_to_devnull():  # pulp.HiGHS builds its own Highs; some PuLP/highspy pairs log to stdout
        prob.solve(solver)
    status = pulp.LpStatus.get(prob.status, str(prob.status))
    bound = None
    if backend == "pulp-highs" and getattr(prob, "solverModel", None) is not None:
        model = prob.solverModel
        status = model.modelStatusToString(model.getModelStatus())
        raw = model.getInfo().mip_dual_bound
        bound = raw if math.isfinite(raw) else None
    # a time-limited run reports status "Optimal" with sol_status "integer feasible": read both
    if prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        return RawResult(None, status, False, bound, num_rows)
    selected = [j for j in range(n) if (xs[j].varValue or 0.0) > 0.5]
    return RawResult(selected, status, prob.sol_status == pulp.LpSolutionOptimal, bound, num_rows)


def _cbc(cfg: IlpConfig):
    """CBC: a system ``cbc`` (COIN_CMD) if installed, else the binary bundled with PuLP (PULP_CBC_CMD)."""
    import warnings

    import pulp

    options = dict(msg=False, timeLimit=cfg.time_limit_s, gapRel=cfg.mip_gap, threads=cfg.threads)
    coin = pulp.COIN_CMD(**options)
    if coin.available():
        return coin
    with warnings.catch_warnings():  # PuLP 3 deprecates the bundled binary in favour of pulp[cbc]
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(**options)


