"""Jobs of different owners on one GPU: which sharing a group of several owners may use, and the ratios it plans with.

Legacy MPS runs one control daemon's server per user at a time: a second user's clients wait until the first
user's have finished (``nvidia-cuda-mps-control``'s man page), so an MPS "pair" of alice's and bob's jobs would run
one after the other. Newer drivers can serve several users at once; the cluster file says which GPU types do
(``mps_multi_user: true``, :mod:`scheduler.model.cluster`; default false). And a Slurm batch job runs as one user,
so with jobs run as their owners (``--users multi``) a Slurm group never mixes owners whatever the sharing mode.

:class:`OwnerRule` says per GPU type how a group of several owners shares: :data:`SAME` (as any group: the mode is
not one-user-at-a-time, or the type's MPS is multi-user), :data:`TIMESLICE` (the one-user-at-a-time mode is
replaced by time-slicing for that group, planned with time-slicing's measured ratios) or :data:`NEVER`.
:class:`OwnersTable` is the round's table as the policy reads it under the rule: a group of one owner gets the
table's ratios; a group of several on a :data:`TIMESLICE` type the time-slicing table's (none: not planned); on a
:data:`NEVER` type none. A job's owner is :attr:`scheduler.model.jobs.Job.owner` (``""`` everywhere: one owner,
and the rule changes nothing).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scheduler.model.colocation import ColocationTable

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.cluster import Cluster
    from scheduler.model.jobs import Job

SAME = "same"
TIMESLICE = "timeslice"
NEVER = "never"


@dataclass(frozen=True)
class OwnerRule:
    """How a group of jobs of several owners shares a GPU of each type (absent: :data:`SAME`)."""

    across: Mapping[str, str] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)  # GPU type -> why (shown on the jobs of such a group)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.across.items())))

    @property
    def restricts(self) -> bool:
        """Whether owners matter at all (else the round's table is used as it is)."""
        return any(v != SAME for v in self.across.values())

    def of(self, gpu_type: str) -> str:
        return self.across.get(gpu_type, SAME)

    def group_sharing(self, gpu_type: str, sharing: str, owners: Collection[str]) -> tuple[str | None, str]:
        """The sharing mode a group of ``owners`` uses on ``gpu_type`` under the server's ``sharing`` (None: it may
        not share) and why it differs from ``sharing`` ("" when it does not)."""
        if len(set(owners)) <= 1 or self.of(gpu_type) == SAME:
            return sharing, ""
        why = self.reasons.get(gpu_type, "")
        return (TIMESLICE, why) if self.of(gpu_type) == TIMESLICE else (None, why)


def owner_rule(cluster: "Cluster", *, one_user_at_a_time: bool, one_uid_per_group: bool = False) -> OwnerRule:
    """The rule of a server: ``one_user_at_a_time`` — its sharing mode serves one user at a time (MPS:
    :attr:`profiler.gpu.sharing.SharingMode.one_user_at_a_time`) except on types whose MPS is multi-user;
    ``one_uid_per_group`` — its backend runs a group as one user (Slurm, with jobs run as their owners)."""
    across, reasons = {}, {}
    for t in cluster:
        if one_uid_per_group:
            across[t.name] = NEVER
            reasons[t.name] = "jobs of different owners never share a GPU here: a Slurm job runs as one user"
        elif one_user_at_a_time and not t.mps_multi_user:
            across[t.name] = TIMESLICE
            reasons[t.name] = (f"jobs of different owners time-slice on {t.name}: its MPS serves one user at a "
                               "time (the cluster file's mps_multi_user is false)")
    return OwnerRule(across, reasons)


def _owners(jobs: "Sequence[Job]") -> int:
    return len({j.owner for j in jobs})


@dataclass(frozen=True, eq=False)
class OwnersTable(ColocationTable):
    """The round's table (``inner``) under an :class:`OwnerRule`: a group of several owners on a type the rule
    restricts is looked up in ``timeslice`` (:data:`TIMESLICE`; no table: not planned) or not at all
    (:data:`NEVER`). What the server measured is the inner table's, for groups that share as it does."""

    inner: ColocationTable | None = None
    rule: OwnerRule = field(default_factory=OwnerRule)
    timeslice: ColocationTable | None = None

    def __hash__(self) -> int:
        return id(self)

    def _table(self, gpu_type: str, jobs: "Sequence[Job]") -> ColocationTable | None:
        if _owners(jobs) <= 1:
            return self.inner
        how = self.rule.of(gpu_type)
        return self.inner if how == SAME else self.timeslice if how == TIMESLICE else None

    def lookup(self, gpu_type: str, job_a: "Job", job_b: "Job") -> tuple[float, float] | None:
        table = self._table(gpu_type, (job_a, job_b))
        return table.lookup(gpu_type, job_a, job_b) if table is not None else None

    def triple_ratios(self, gpu_type: str, jobs: "Sequence[Job]") -> tuple[float, float, float] | None:
        table = self._table(gpu_type, jobs)
        return table.triple_ratios(gpu_type, jobs) if table is not None else None

    def measured_ratio(self, gpu_type: str, job: "Job", others: "Sequence[Job]") -> float | None:
        table = self._table(gpu_type, (job, *others))
        return table.measured_ratio(gpu_type, job, others) if table is self.inner and table is not None else None


def under_rule(table: ColocationTable | None, rule: OwnerRule, timeslice: ColocationTable | None = None
               ) -> ColocationTable | None:
    """``table`` as a round plans with it under ``rule``: itself when owners do not matter (one owner, or a rule
    that restricts nothing), else an :class:`OwnersTable`."""
    if table is None or not rule.restricts:
        return table
    return OwnersTable(table.ratios, inner=table, rule=rule, timeslice=timeslice)


class OwnerPlanning:
    """A server's :class:`OwnerRule` with the time-slicing ratios it falls back on: the round's table under the rule
    (the same wrapper while the round's table is the same object, so the policy's caches stay warm) and each
    group's sharing mode."""

    def __init__(self, rule: OwnerRule, timeslice: ColocationTable | None = None) -> None:
        self.rule, self.timeslice = rule, timeslice
        self._last: tuple[ColocationTable | None, ColocationTable | None] = (None, None)

    def table(self, table: ColocationTable | None) -> ColocationTable | None:
        if table is None or table is not self._last[0]:
            self._last = (table, under_rule(table, self.rule, self.timeslice))
        return self._last[1]

    def group_sharing(self, gpu_type: str, sharing: str, owners: Collection[str]) -> tuple[str | None, str]:
        return self.rule.group_sharing(gpu_type, sharing, owners)
