"""Co-location ratios as the scheduler looks them up: (GPU type, job a, job b) -> (ratio_a, ratio_b).

``ratio = co-located throughput / solo throughput = t / t'`` for each job of the pair on one GPU (the file
format and its reader live in :mod:`scheduler.formats.colocation_table`). A ratio of 0 marks an infeasible pair
(OOM, crash). Job types are ``model@batch`` or plain application names; a lookup tries the exact
``model@batch`` keys first, then the application names, so a table measured per application applies to
every batch size. A multi-GPU single-node pair (both jobs data-parallel over the same GPUs) uses the same
ratio as on one GPU: each GPU hosts one replica of each job.

Groups of three (:meth:`ColocationTable.group_ratios`): the table holds pairs only (no measured triples
are available at scale yet), so a triple's ratios are *predicted* from its three pairs by adding slowdowns
(:data:`TRIPLE_RATIOS`). The ILP's triple columns and the simulator's progress both read them here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    import pandas as pd

    from scheduler.model.jobs import Job

TRIPLE_RATIOS = "predicted from pairs (additive slowdowns)"  # where a group of three's ratios come from
MeasuredKey = tuple[str, str, str]  # (GPU type, a member's job type, its partners' types): what serve measured
Interval = tuple[float, float]


@dataclass(frozen=True)
class ColocationTable:
    """Lookup of pair ratios; keys are stored in both orders so lookups need no sorting.

    ``intervals``: for the rows that have one (a predicted table's ``low_a``/``high_a``/``low_b``/``high_b``), each
    ratio's interval of coverage ``interval_level``, in the key's order; the pair belief reads them as its
    prior's spread (:func:`scheduler.learning.pairs.table_prior`). Policies never read them.
    """

    ratios: Mapping[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)
    intervals: Mapping[tuple[str, str, str], tuple[Interval, Interval]] = field(default_factory=dict, kw_only=True)
    interval_level: float = field(default=0.8, kw_only=True)

    def __hash__(self) -> int:
        return id(self)

    def __len__(self) -> int:
        return len(self.ratios)

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, str, str, float, float]]) -> "ColocationTable":
        """Build from ``(gpu_type, type_a, type_b, ratio_a, ratio_b)`` tuples."""
        table: dict[tuple[str, str, str], tuple[float, float]] = {}
        for gpu_type, a, b, ra, rb in rows:
            table[(gpu_type, a, b)] = (float(ra), float(rb))
            table[(gpu_type, b, a)] = (float(rb), float(ra))
        return cls(table)

    @classmethod
    def from_frame(cls, frame: "pd.DataFrame") -> "ColocationTable":
        """Build from the validated DataFrame returned by :func:`scheduler.formats.colocation_table.read_colocation_table`
        (with the intervals of the rows that carry them, when the frame has interval columns)."""
        cols = ["gpu_type", "type_a", "type_b", "ratio_a", "ratio_b"]
        table = cls.from_rows(frame[cols].itertuples(index=False, name=None))
        bounds = ["low_a", "high_a", "low_b", "high_b"]
        if not set(bounds) <= set(frame.columns):
            return table
        rows = [(g, a, b, (la, ha), (lb, hb)) for g, a, b, la, ha, lb, hb in frame[cols[:3] + bounds].itertuples(
            index=False, name=None) if la == la and ha == ha and lb == lb and hb == hb]  # NaN: no interval
        level = float(frame["interval_level"].dropna().iloc[0]) if "interval_level" in frame.columns and \
            frame["interval_level"].notna().any() else 0.8
        return cls.with_intervals(table.ratios, rows, level)

    @classmethod
    def with_intervals(cls, ratios: Mapping[tuple[str, str, str], tuple[float, float]],
                       rows: Iterable[tuple[str, str, str, Interval, Interval]], level: float) -> "ColocationTable":
        """A table of ``ratios`` (both orders, as stored) with ``(gpu_type, a, b, interval_a, interval_b)`` rows."""
        intervals: dict[tuple[str, str, str], tuple[Interval, Interval]] = {}
        for gpu_type, a, b, ia, ib in rows:
            ia, ib = (float(ia[0]), float(ia[1])), (float(ib[0]), float(ib[1]))
            intervals[(gpu_type, a, b)] = (ia, ib)
            intervals[(gpu_type, b, a)] = (ib, ia)
        return cls(dict(ratios), intervals=intervals, interval_level=level)


    @property
    def gpu_types(self) -> frozenset[str]:
        return frozenset(k[0] for k in self.ratios)

    def lookup(self, gpu_type: str, job_a: "Job", job_b: "Job") -> tuple[float, float] | None:
        """Ratios ``(r_a, r_b)`` for two jobs sharing a GPU of ``gpu_type``; None when unknown.

        Tries ``model@batch`` keys, then mixed, then application names.
        """
        keys_a = (job_a.job_type, job_a.application) if job_a.batch_size else (job_a.application,)
        keys_b = (job_b.job_type, job_b.application) if job_b.batch_size else (job_b.application,)
        for ka in keys_a:
            for kb in keys_b:
                hit = self.ratios.get((gpu_type, ka, kb))
                if hit is not None:
                    return hit
        return None

    def measured_ratio(self, gpu_type: str, job: "Job", others: "Sequence[Job]") -> float | None:
        """The ratio the live server *measured* for ``job``'s type beside the types of ``others`` on ``gpu_type``
        (not the belief it plans with); None when they never ran together. A plain table measured nothing."""
        return None

    def triple_ratios(self, gpu_type: str, jobs: "Sequence[Job]") -> tuple[float, float, float] | None:
        """Each member's ratio in a group of three, predicted from the pairs by adding slowdowns; None if unknown.

        For member ``x`` with others ``y`` and ``z``: ``1/ρ_x = 1 + (1/ρ_x|y − 1) + (1/ρ_x|z − 1)`` — each
        partner adds the slowdown it causes alone. Plain time-slicing (ρ = 1/2 in every pair) gives 1/3
        each; a triple is known only when all three pairs are known with positive ratios.
        """
        out = []
        for n, x in enumerate(jobs):
            slowdown = 1.0
            for m, other in enumerate(jobs):
                if m == n:
                    continue
                r = self.lookup(gpu_type, x, other)
                if r is None or r[0] <= 0:
                    return None
                slowdown += 1.0 / r[0] - 1.0
            out.append(1.0 / slowdown)
        return out[0], out[1], out[2]

    def group_ratios(self, gpu_type: str, jobs: "Sequence[Job]") -> tuple[float, ...] | None:
        """Each member's ratio in a group of one (1.0), two (:meth:`lookup`) or three (:meth:`triple_ratios`)."""
        if len(jobs) == 1:
            return (1.0,)
        if len(jobs) == 2:
            return self.lookup(gpu_type, jobs[0], jobs[1])
        if len(jobs) == 3:
            return self.triple_ratios(gpu_type, jobs)
        return None


def partner_key(others: "Sequence[Job]") -> str:
    """The other members of a job's group as the measurements key them: their job types, sorted, ``+``-joined."""
    return "+".join(sorted(o.job_type for o in others))


@dataclass(frozen=True, eq=False)
class MeasuredTable(ColocationTable):
    """A round's table (``inner``) with what the live server measured beside it: the ratio each member of a running
    group of job types reached (:meth:`measured_ratio`, pairs and groups of three alike), so a bound a group was
    measured to break keeps it out of the plan whatever the belief says (:class:`BoundedTable`). Lookups are the
    inner table's. ``measured``: (GPU type, the member's job type, :func:`partner_key` of the others) -> ratio."""

    inner: ColocationTable | None = None
    measured: Mapping[MeasuredKey, float] = field(default_factory=dict)
    samples: Mapping[MeasuredKey, int] = field(default_factory=dict)  # co-located samples behind each ratio
    # a group running together now is judged on this many samples (the live server's split rule, which says why);
    # a group to be formed, on any
    running_samples: int = 1

    def __hash__(self) -> int:
        return id(self)

    def lookup(self, gpu_type: str, job_a: "Job", job_b: "Job") -> tuple[float, float] | None:
        return self.inner.lookup(gpu_type, job_a, job_b) if self.inner is not None else None

    def triple_ratios(self, gpu_type: str, jobs: "Sequence[Job]") -> tuple[float, float, float] | None:
        return self.inner.triple_ratios(gpu_type, jobs) if self.inner is not None else None

    def measured_ratio(self, gpu_type: str, job: "Job", others: "Sequence[Job]") -> float | None:
        key = (gpu_type, job.job_type, partner_key(others))
        if _together((job, *others)) and self.samples.get(key, 0) < self.running_samples:
            return None
        return self.measured.get(key)


def _together(jobs: "Sequence[Job]") -> bool:
    """The jobs run together now (each one's current partner is among them)."""
    names = {j.name for j in jobs}
    return len(jobs) > 1 and all(j.current_partner in names for j in jobs)


def within_bound(ratio: float, bound: float | None) -> bool:
    """Whether a member at ``ratio`` of its solo speed keeps its slowdown bound (None: any slowdown)."""
    return bound is None or ratio * bound >= 1.0 - 1e-9


def _held_together(jobs: "Sequence[Job]") -> bool:
    """The jobs run together now and one is held there (pinned): a group the round may keep but not form."""
    return any(j.pinned for j in jobs) and _together(jobs)


@dataclass(frozen=True, eq=False)
class BoundedTable(ColocationTable):
    """The ILP's view of ``inner``: no ratio for a group with an ``exclusive`` member, or in which a member would run
    slower than its bound (its own ``max_slowdown``, else ``default_bound``) — under the ratios ``inner`` plans
    with (the belief, explored toward the upper end of its interval), and under what the server measured for that
    group (:meth:`ColocationTable.measured_ratio`, from its first sample): the lower wins, so a measurement is never
    outweighed by the belief's optimism. Pairs and groups of three alike. A group running now with a held (pinned)
    member keeps its ratio while it is held: it cannot move anyway, and the live server releases the members of a
    group that breaks a bound (:mod:`scheduler.service.server`)."""

    inner: ColocationTable | None = None
    default_bound: float | None = None

    def __hash__(self) -> int:
        return id(self)

    def measured_ratio(self, gpu_type: str, job: "Job", others: "Sequence[Job]") -> float | None:
        return self.inner.measured_ratio(gpu_type, job, others) if self.inner is not None else None

    def lookup(self, gpu_type: str, job_a: "Job", job_b: "Job") -> tuple[float, float] | None:
        hit = self.inner.lookup(gpu_type, job_a, job_b) if self.inner is not None else None
        return hit if hit is None else self._kept(gpu_type, (job_a, job_b), hit)  # type: ignore[return-value]

    def triple_ratios(self, gpu_type: str, jobs: "Sequence[Job]") -> tuple[float, float, float] | None:
        hit = self.inner.triple_ratios(gpu_type, jobs) if self.inner is not None else None
        return hit if hit is None else self._kept(gpu_type, jobs, hit)  # type: ignore[return-value]

    def _kept(self, gpu_type: str, jobs: "Sequence[Job]", hit: tuple[float, ...]) -> tuple[float, ...] | None:
        """``hit`` when the group may be planned: no exclusive member, and every member within its bound at the
        lower of its planned and its measured ratio (or the group is held together now)."""
        if any(j.requirements.exclusive for j in jobs):
            return None
        if _held_together(jobs):
            return hit
        for n, (job, planned) in enumerate(zip(jobs, hit)):
            seen = self.measured_ratio(gpu_type, job, [o for m, o in enumerate(jobs) if m != n])
            worst = planned if seen is None else min(planned, seen)
            if not within_bound(worst, job.slowdown_bound(self.default_bound)):
                return None
        return hit


class JobClass(NamedTuple):
    """Jobs of one class get the same answers from a round's (bounded) table: same application, job type,
    bounds (``max_slowdown``, ``exclusive``: :class:`BoundedTable`) and owner.

    Every field has one type, so classes sort (candidates and pricing order them): a job without a bound of
    its own (``max_slowdown`` None: the policy's cluster-wide bound applies) is ``has_own_bound=False,
    own_bound=0.0``, never a ``None`` beside another class's float."""

    application: str
    job_type: str
    has_own_bound: bool
    own_bound: float
    exclusive: bool
    owner: str  # a group of several owners may get other ratios (scheduler.model.owners.OwnersTable)


def class_key(job: "Job") -> JobClass:
    """The class of ``job`` (:class:`JobClass`)."""
    needs = job.requirements
    bound = needs.max_slowdown
    return JobClass(job.application, job.job_type, bound is not None, float(bound) if bound is not None else 0.0,
                    bool(needs.exclusive), job.owner)
