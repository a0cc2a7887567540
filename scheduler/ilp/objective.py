"""The round objective, in one place: every column weight, objective value, bound and HiGHS offset.

Natural form (what users see): for ``p < 0`` ``Σ_columns Σ_members v^p + λ·(unallocated jobs)``,
minimised; for ``p > 0`` ``Σ_columns Σ_members v^p``, maximised. Because ``unallocated = |J| − Σ |members|``
is linear in the columns, the solver works on the *minimisation form* ``Σ weight·z`` with
``weight = Σ v^p − λ·|members|`` (p < 0) or ``−Σ v^p`` (p > 0); ``λ·|J|`` (p < 0) is the constant
that turns one into the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.colocation import ColocationTable
    from scheduler.model.jobs import Job


@dataclass(frozen=True)
class Objective:
    """Sia's objective with goodput power ``p`` (≠ 0) and penalty ``lam`` per unallocated job."""

    p: float
    lam: float

    @classmethod
    def of(cls, cfg: object) -> "Objective":
        """The objective an :class:`~scheduler.ilp.config.IlpConfig` asks for."""
        return cls(cfg.p, cfg.lambda_unallocated)  # type: ignore[attr-defined]

    @property
    def minimise(self) -> bool:
        """True when the natural objective is minimised (p < 0)."""
        return self.p < 0

    def member_weight(self, value):  # float or numpy array in, same out
        """One member's share of a column weight: ``v^p − λ`` (p < 0) or ``−v^p`` (p > 0)."""
        return value ** self.p - self.lam if self.p < 0 else -(value ** self.p)

    def column_weight(self, values: Sequence[float]) -> float:
        """Coefficient in the minimisation form: ``Σ v^p − λ·|members|`` (p < 0) or ``−Σ v^p`` (p > 0)."""
        p = self.p
        total = 0.0
        for v in values:  # a plain loop: this runs for every column, tens of thousands per round
            total += v ** p
        return total - self.lam * len(values) if p < 0 else -total

    def column_weights(self, values: Sequence[Sequence[float]]) -> list[float]:
        """:meth:`column_weight` of many columns (one-member columns without the per-call overhead)."""
        p, lam = self.p, self.lam
        if all(len(v) == 1 for v in values):
            if p < 0:
                return [v[0] ** p - lam for v in values]
            return [-(v[0] ** p) for v in values]
        return [self.column_weight(v) for v in values]

    def natural(self, member_values: Iterable[float], num_jobs: int) -> float:
        """The natural objective of a selection whose members have normalised goodputs ``member_values``."""
        allocated = 0
        total = 0
        for v in member_values:
            total += v ** self.p
            allocated += 1
        if self.p < 0:
            return total + self.lam * (num_jobs - allocated)
        return total

    def from_weights(self, weight_sum: float, num_jobs: int) -> float:
        """Natural objective from the minimisation form's value."""
        return weight_sum + self.lam * num_jobs if self.p < 0 else -weight_sum

    def to_weights(self, natural: float, num_jobs: int) -> float:
        """Minimisation form from a natural objective value (e.g. a solver's bound)."""
        return natural - self.lam * num_jobs if self.p < 0 else -natural

    def solver_form(self, weights: np.ndarray, num_jobs: int, minimise_form: bool = False
                    ) -> tuple[np.ndarray, float, bool]:
        """(costs, offset, maximise) for a solver whose objective, bound and gap should be the natural ones.

        ``minimise_form=True`` gives ``min Σ weight·z`` without offset for any p (used for dual prices).
        """
        maximise = self.p > 0 and not minimise_form
        offset = 0.0 if maximise or minimise_form else self.lam * num_jobs
        return (-weights if maximise else weights), offset, maximise

    def gain(self, weights: np.ndarray) -> np.ndarray:
        """True where taking the column beats leaving its members unallocated (weight < 0)."""
        return weights < 0

    def close_enough(self, weight: float, bound_weight: float, num_jobs: int, gap: float) -> bool:
        """True when a selection of total ``weight`` is within relative ``gap`` of ``bound_weight``."""
        natural = self.from_weights(weight, num_jobs)
        return abs(weight - bound_weight) <= gap * max(abs(natural), 1e-9)


def beneficial_ratio(colocation: "ColocationTable", cache: dict[str, tuple[float, float] | None], gpu_type: str,
                      a: Job, b: Job, min_benefit: float) -> tuple[float, float] | None:
    """The pair's ratios on ``gpu_type`` if both are positive and sum to ≥ 1 + min_benefit, else None (cached)."""
    if gpu_type not in cache:
        cache[gpu_type] = colocation.lookup(gpu_type, a, b)
    r = cache[gpu_type]
    if r is None or r[0] <= 0 or r[1] <= 0 or r[0] + r[1] < 1 + min_benefit:
        return None
    return r
