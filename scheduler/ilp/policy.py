"""The packing-aware Sia policy: build, price, solve, decide."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduler.cluster import Cluster
from scheduler.ilp.build import build_problem
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.solve import decision_from, solve_problem
from scheduler.jobs import Job
from scheduler.policy import RoundContext, RoundDecision


@dataclass(frozen=True)
class PackingPolicy:
    """The packing-aware Sia policy: ``allocate`` builds the round ILP, solves it, returns the decision.

    ``PackingPolicy(IlpConfig(packing=False), name="sia")`` is Sia without packing.
    """

    config: IlpConfig = IlpConfig()
    name: str = "colocate"

    def allocate(self, jobs: Sequence[Job], cluster: Cluster, context: RoundContext) -> RoundDecision:
        problem = build_problem(jobs, cluster, context.goodput, context.colocation, self.config)
        solution = solve_problem(problem, self.config)
        return decision_from(problem, solution)

    def with_config(self, **changes: Any) -> "PackingPolicy":
        return replace(self, config=replace(self.config, **changes))


def sia_policy(**changes: Any) -> PackingPolicy:
    """Sia's policy (no pair variables) with optional :class:`IlpConfig` changes."""
    return PackingPolicy(replace(IlpConfig(packing=False), **changes), name="sia")
