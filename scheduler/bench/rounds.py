"""Steady-state rounds for ``colocate bench scheduler``: the rounds after the first, as a running scheduler
sees them.

A live or simulated scheduler solves one round a minute over mostly the same jobs: each keeps the
allocation it was given (now its *current* configuration and partner, so restart factors apply), ages by
a round, and a few finish while a few arrive. :func:`next_round_jobs` makes that next round from the
last one's decision; :func:`steady_rounds` solves such rounds one after the other with the packing
policy's warm start (:mod:`scheduler.ilp.warm`) and times each, so the benchmark can report the
steady-state round next to the cold first round.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from scheduler.ilp.build import build_problem
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.solve import decision_from, solve_problem
from scheduler.ilp.warm import WarmStart
from scheduler.model.cluster import Cluster
from scheduler.model.colocation import ColocationTable
from scheduler.model.goodput import ProfileGoodputModel
from scheduler.model.jobs import Job
from scheduler.model.policy import RoundDecision

ROUND_S = 60.0


def next_round_jobs(jobs: list[Job], decision: RoundDecision, rng: random.Random, turnover: float,
                    arrivals: Iterator[Job], round_index: int) -> list[Job]:
    """The next round's active jobs: each keeps its allocation (now current) and ages a round; a share
    ``turnover`` of them, drawn at random, finish and as many new jobs (not running) take their place."""
    placed = {a.job: a for a in decision.allocations}
    out = []
    for job in jobs:
        if rng.random() < turnover:
            new = next(arrivals)
            out.append(replace(new, name=f"{new.name}-r{round_index}", current_gpu_type=None,
                               current_num_gpus=0, current_partner=None, age_s=0.0, restarts=0))
            continue
        a = placed.get(job.name)
        moved = a is not None and job.current_gpu_type is not None and (
            a.gpu_type != job.current_gpu_type or a.num_gpus != job.current_num_gpus)
        out.append(replace(job, age_s=job.age_s + ROUND_S, restarts=job.restarts + int(moved),
                           current_gpu_type=a.gpu_type if a else None, current_num_gpus=a.num_gpus if a else 0,
                           current_partner=a.partner if a else None))
    return out


def timed_round(jobs: list[Job], cluster: Cluster, model: ProfileGoodputModel, coloc: ColocationTable | None,
                cfg: IlpConfig, warm: WarmStart | None = None) -> dict[str, Any]:
    """Build and solve one round (with ``warm``, as the policy does); times, objective and the decision."""
    cpu_started = time.process_time()
    started = time.perf_counter()
    problem = build_problem(jobs, cluster, model, coloc, cfg, warm=warm)
    built = time.perf_counter()
    solution = solve_problem(problem, cfg, warm=warm)
    done = time.perf_counter()
    return {"build_s": built - started, "solve_s": done - built, "round_s": done - started,
            "cpu_s": time.process_time() - cpu_started,
            "objective": solution.info.objective, "status": solution.info.status, "fallback": solution.info.fallback,
            "columns": problem.num_columns, "pairs": problem.num_pairs, "problem": problem,
            "decision": decision_from(problem, solution),
            "pairs_used": sum(1 for j in solution.selected if len(problem.members[j]) == 2),
            "triples_used": sum(1 for j in solution.selected if len(problem.members[j]) == 3)}


def steady_rounds(jobs: list[Job], first: dict[str, Any], cluster: Cluster, model: ProfileGoodputModel,
                  coloc: ColocationTable, cfg: IlpConfig, warm: WarmStart, *, rounds: int, turnover: float,
                  arrivals: Iterator[Job], seed: int,
                  reference: Callable[[list[Job]], tuple[float, str]] | None = None) -> list[dict[str, Any]]:
    """Rounds 2..``rounds`` after the cold round ``first`` (solved with ``warm``): one dict per round with
    the warm round's times and objective and, for the last round and with ``reference``, its gap to that
    reference (a bound costs more than the rounds themselves: one per sequence keeps the benchmark short)."""
    rng = random.Random(seed)
    rows, last = [], first
    for index in range(2, rounds + 1):
        jobs = next_round_jobs(jobs, last["decision"], rng, turnover, arrivals, index)
        last = timed_round(jobs, cluster, model, coloc, cfg, warm)
        row = {f"warm_{key}": last[key] for key in ("build_s", "solve_s", "round_s", "cpu_s", "objective",
                                                     "columns", "status", "fallback", "pairs_used")}
        row["round"] = index
        if reference is not None and index == rounds:
            ref, kind = reference(jobs)
            row["warm_reference"], row["warm_reference_kind"] = ref, kind
            row["warm_gap"] = (last["objective"] - ref) / abs(ref) if ref and ref == ref else float("nan")
        rows.append(row)
    return rows
