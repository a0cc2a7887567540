"""The packing-aware Sia policy: build, price, solve, decide."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.ilp.build import build_problem
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.solve import decision_from, solve_problem
from scheduler.ilp.warm import WarmStart
from scheduler.model.cluster import Cluster
from scheduler.model.jobs import Job
from scheduler.model.policy import PolicyTraits, RoundContext, RoundDecision


@dataclass(frozen=True)
class PackingPolicy:
    """The packing-aware Sia policy: ``allocate`` builds the round ILP, solves it, returns the decision.

    ``PackingPolicy(IlpConfig(packing=False), name="sia")`` is Sia without packing. Each policy object
    keeps the state one round leaves for the next (:class:`WarmStart`, with ``config.warm_start``); a
    copy made by :meth:`with_config` starts cold.
    """

    config: IlpConfig = IlpConfig()
    name: str = "colocate"
    warm: WarmStart = field(default_factory=WarmStart, init=False, compare=False, repr=False)

    @property
    def traits(self) -> PolicyTraits:
        return PolicyTraits(adaptive=True, max_group_size=self.config.max_group_size if self.config.packing else 1)

    def allocate(self, jobs: Sequence[Job], cluster: Cluster, context: RoundContext) -> RoundDecision:
        warm = self.warm if self.config.warm_start else None
        problem = build_problem(jobs, cluster, context.goodput, context.colocation, self.config, warm=warm)
        solution = solve_problem(problem, self.config, warm=warm)
        return decision_from(problem, solution)

    def with_config(self, **changes: Any) -> "PackingPolicy":
        return replace(self, config=replace(self.config, **changes))


def sia_policy(**changes: Any) -> PackingPolicy:
    """Sia's policy (no pair variables) with optional :class:`IlpConfig` changes."""
    return PackingPolicy(replace(IlpConfig(packing=False), **changes), name="sia")
