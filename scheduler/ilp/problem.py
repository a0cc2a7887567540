"""``RoundProblem``: the ILP of one round as plain column arrays, independent of any solver."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from scheduler.ilp.objective import Objective
from scheduler.model.cluster import Cluster
from scheduler.model.configs import Configuration
from scheduler.model.goodput import GoodputEstimate
from scheduler.model.jobs import Job


class InvalidSelection(AssertionError):
    """A selection of columns breaks constraint (1) or (2), or leaves a pinned job out.

    Raised explicitly (never by ``assert``), so the check also runs under ``python -O``; it subclasses
    AssertionError so callers that treat it as a broken invariant keep working.
    """


@dataclass
class ReservedSingles:
    """Single columns held back from a large round's first LP and priced in when their reduced cost is
    negative (column generation over singles): parallel arrays, one entry per held-back column."""

    job: np.ndarray
    conf: np.ndarray
    gpus: np.ndarray
    type_of: np.ndarray        # index into cluster.type_names
    weight: np.ndarray
    values: list[float]
    estimates: list[GoodputEstimate]
    released: np.ndarray       # bool: already a column of the problem

    @property
    def num_left(self) -> int:
        return int((~self.released).sum())


@dataclass
class RoundProblem:
    """The ILP of one round as plain arrays.

    Column ``j`` puts the jobs ``members[j]`` (one, or two or three for a group) on configuration
    ``configs[conf[j]]``, taking ``gpus[j]`` GPUs of that type; ``values[j]`` are the members' normalised
    goodputs (times their co-location ratio in a group) and ``weight[j]`` the column's coefficient in the
    minimisation form of :attr:`objective`. Columns are only ever added through :meth:`add_columns`.
    """

    jobs: tuple[Job, ...]
    cluster: Cluster
    configs: tuple[Configuration, ...]
    objective: Objective
    members: list[tuple[int, ...]] = field(default_factory=list)
    conf: list[int] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    values: list[tuple[float, ...]] = field(default_factory=list)
    estimates: list[tuple[GoodputEstimate, ...]] = field(default_factory=list)
    ratios: list[tuple[float, ...]] = field(default_factory=list)
    weight: list[float] = field(default_factory=list)
    pinned: list[bool] = field(default_factory=list)
    num_groups: int = 0
    num_group_candidates: int = 0
    single_node_g: list[dict[int, float]] = field(default_factory=list)  # per job: config -> G (for bounds)
    pricing: Any = None                     # scheduler.ilp.pricing.PricingData (pricing builds on this module)
    pricing_passes: int = 0
    lp_values: "np.ndarray | None" = None  # LP relaxation values of the first len(lp_values) columns
    lp_weight: float | None = None          # LP optimum (minimisation form) when lp_values covers every column
    reserved: ReservedSingles | None = None
    build_time_s: float = 0.0
    pricing_time_s: float = 0.0
    lp_iterations: int = 0                  # simplex iterations of pricing's LP solves
    warm_started: bool = False              # pricing's first LP started from the previous round's basis

    @property
    def p(self) -> float:
        return self.objective.p

    @property
    def lam(self) -> float:
        return self.objective.lam

    @property
    def num_columns(self) -> int:
        return len(self.members)

    @property
    def num_pairs(self) -> int:  # the name used before groups of three existed
        return self.num_groups

    def add_columns(self, members: Sequence[tuple[int, ...]], conf: Sequence[int], values: Sequence[tuple[float, ...]],
                    estimates: Sequence[tuple[GoodputEstimate, ...]] | None = None,
                    ratios: Sequence[tuple[float, ...]] | None = None) -> range:
        """Append columns (the only way columns enter the problem); returns their indices.

        A column's GPUs are its configuration's, its weight comes from :attr:`objective`; ``ratios``
        default to 1 (a job alone) and ``estimates`` to none (columns priced only for a bound).
        """
        first = len(self.members)
        configs = self.configs
        self.members.extend(members)
        self.conf.extend(conf)
        self.gpus.extend(configs[ci].num_gpus for ci in conf)
        self.values.extend(values)
        self.estimates.extend(estimates if estimates is not None else [()] * len(members))
        self.ratios.extend(ratios if ratios is not None else [(1.0,) * len(m) for m in members])
        self.weight.extend(self.objective.column_weights(values))
        self.num_groups += sum(1 for m in members if len(m) > 1)
        return range(first, len(self.members))

    def release_reserved(self, which: "np.ndarray | None" = None) -> range:
        """Make held-back singles (indices into :attr:`reserved`; None: all left) columns; returns their indices."""
        res = self.reserved
        if res is None:
            return range(self.num_columns, self.num_columns)
        if which is None:
            which = np.nonzero(~res.released)[0]
        which = which[~res.released[which]]
        res.released[which] = True
        picked = which.tolist()
        return self.add_columns([(i,) for i in res.job[which].tolist()], res.conf[which].tolist(),
                                [(res.values[n],) for n in picked], [(res.estimates[n],) for n in picked])

    def member_array(self, repeat_first: bool = False) -> np.ndarray:
        """Members as a (columns × 3) int array; missing members are -1 (or, with ``repeat_first``, the first)."""
        n = self.num_columns
        sizes = np.fromiter(map(len, self.members), dtype=np.int64, count=n)
        flat = np.fromiter(chain.from_iterable(self.members), dtype=np.int64, count=int(sizes.sum()))
        out = np.full((n, 3), -1, dtype=np.int64)
        starts = np.cumsum(sizes) - sizes
        for pos in range(3):  # the pos-th member of every column that has one
            has = sizes > pos
            out[has, pos] = flat[starts[has] + pos]
            if repeat_first and pos:
                out[~has, pos] = out[~has, 0]
        return out

    def job_columns(self) -> list[list[int]]:
        cols: list[list[int]] = [[] for _ in self.jobs]
        for j, mem in enumerate(self.members):
            for i in mem:
                cols[i].append(j)
        return cols

    def value_of(self, selected: Sequence[int]) -> float:
        """The natural objective of a selection (p < 0: Σ G^p + λ·unallocated, minimised; p > 0: maximised)."""
        return self.objective.natural((v for j in selected for v in self.values[j]), len(self.jobs))

    def objective_from_weights(self, weight_sum: float) -> float:
        """Natural objective from the minimisation form's value."""
        return self.objective.from_weights(weight_sum, len(self.jobs))

    def check(self, selected: Sequence[int]) -> None:
        """Raise :class:`InvalidSelection` if a selection breaks (1) or (2) or leaves a pinned job out."""
        used: dict[int, int] = {}
        per_type: dict[str, int] = {}
        for j in selected:
            for i in self.members[j]:
                used[i] = used.get(i, 0) + 1
            t = self.configs[self.conf[j]].gpu_type
            per_type[t] = per_type.get(t, 0) + self.gpus[j]
        twice = [self.jobs[i].name for i, v in used.items() if v != 1]
        if twice:
            raise InvalidSelection(f"jobs chosen more than once: {', '.join(twice[:5])}")
        for t, n in per_type.items():
            if n > self.cluster.capacity(t):
                raise InvalidSelection(f"{t}: {n} GPUs > capacity {self.cluster.capacity(t)}")
        has_column = set(i for m in self.members for i in m)
        left_out = [self.jobs[i].name for i, pin in enumerate(self.pinned) if pin and i in has_column and i not in used]
        if left_out:
            raise InvalidSelection(f"pinned jobs left out: {', '.join(left_out[:5])}")
