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
from scheduler.model.colocation import BoundedTable, ColocationTable
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

    _bounded: dict[int, tuple[ColocationTable, BoundedTable]] = field(default_factory=dict, init=False, compare=False,
                                                                        repr=False)

    @property
    def traits(self) -> PolicyTraits:
        packing = self.config.packing
        return PolicyTraits(adaptive=True, max_group_size=self.config.max_group_size if packing else 1,
                            max_slowdown=self.config.max_slowdown if packing else None)

    def allocate(self, jobs: Sequence[Job], cluster: Cluster, context: RoundContext) -> RoundDecision:
        warm = self.warm if self.config.warm_start else None
        problem = build_problem(jobs, cluster, context.goodput, self.bounded(context.colocation), self.config,
                                warm=warm)
        solution = solve_problem(problem, self.config, warm=warm)
        return decision_from(problem, solution)

    def bounded(self, table: ColocationTable | None) -> ColocationTable | None:
        """``table`` as the ILP reads it: no group with an exclusive member or one a member's slowdown bound rules
        out (:class:`BoundedTable`). The same wrapper while the round's table is the same object, so the caches
        keyed by a table stay warm."""
        if table is None or not self.config.packing:
            return table
        hit = self._bounded.get(id(table))
        if hit is not None and hit[0] is table:
            return hit[1]
        if len(self._bounded) > 8:
            self._bounded.clear()
        wrapped = BoundedTable(table.ratios, inner=table, default_bound=self.config.max_slowdown)
        self._bounded[id(table)] = (table, wrapped)
        return wrapped

    def with_config(self, **changes: Any) -> "PackingPolicy":
        return replace(self, config=replace(self.config, **changes))


def sia_policy(**changes: Any) -> PackingPolicy:
    """Sia's policy (no pair variables) with optional :class:`IlpConfig` changes."""
    return PackingPolicy(replace(IlpConfig(packing=False), **changes), name="sia")
