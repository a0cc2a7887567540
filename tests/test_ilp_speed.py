"""Speed-ups of the round ILP that must not change its answers: the MIP solves without HiGHS's feasibility
jump (``IlpConfig.feasibility_jump``) and pricing's batched reduced costs."""

from __future__ import annotations

import pytest
from test_scheduler_ilp import random_instance

from scheduler.ilp import IlpConfig, build_problem, solve_problem
from scheduler.ilp.highs import _model
from scheduler.model.goodput import TableGoodputModel


def test_feasibility_jump_is_off_by_default_and_reaches_highs() -> None:
    cluster, jobs, table, _, coloc = random_instance(3, 6)
    problem = build_problem(jobs, cluster, TableGoodputModel(table), coloc, IlpConfig())
    for on in (False, True):
        h, _ = _model(problem, IlpConfig(feasibility_jump=on))
        assert h.getOptionValue("mip_heuristic_run_feasibility_jump")[1] is on
    assert IlpConfig().feasibility_jump is False


def test_feasibility_jump_does_not_change_the_mip_answers() -> None:
    """With a gap of 0 most rounds go to LP-and-fix and branch and bound: the same selections either way."""
    statuses = set()
    for seed in range(12):
        cluster, jobs, table, _, coloc = random_instance(100 + seed, 14)
        model = TableGoodputModel(table)
        found = []
        for on in (False, True):
            cfg = IlpConfig(mip_gap=0.0, feasibility_jump=on)
            problem = build_problem(jobs, cluster, model, coloc, cfg)
            solution = solve_problem(problem, cfg)
            found.append((solution.selected, solution.info.objective))
            statuses.add(solution.info.status)
        assert found[0][0] == found[1][0]
        assert found[0][1] == pytest.approx(found[1][1], rel=1e-12)
    assert "Optimal" in statuses  # branch and bound ran in at least one round
