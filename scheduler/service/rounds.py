"""The pure part of a live round: policy input from the state, and the difference to enact.

Nothing here touches processes or the database: :mod:`scheduler.service.server` reads the state, calls
these, and carries out the result. A *unit* is what runs on one set of GPUs: one job, or a packed group
(a pair, or three jobs where the policy packs groups of three).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from scheduler.model.jobs import Job
from scheduler.model.policy import JobPlacement, Placement, RoundDecision
from scheduler.service.state.store import RUNNING, JobRow


@dataclass(frozen=True)
class Slot:
    """Where and how one job of a unit runs."""

    job: str
    gpu_type: str
    num_gpus: int
    batch_size: int
    others: tuple[str, ...]  # the other members of its unit, sorted
    nodes: tuple[int, ...]
    gpus: tuple[int, ...]

    @property
    def partner(self) -> str | None:
        """What the ``partner`` column stores: every other member, comma-separated; None when alone."""
        return ",".join(self.others) or None


Unit = tuple[Slot, ...]  # sorted by job name


@dataclass(frozen=True)
class RoundStats:
    """One round's timing: ``policy_s`` is the policy's own call, ``bookkeeping_s`` the rest but enacting."""

    round: int
    active_jobs: int
    total_s: float
    policy_s: float
    bookkeeping_s: float
    enact_s: float
    stopped: int
    started: int
    policy_cpu_s: float = 0.0  # CPU time of this process: what the figures are on a loaded machine
    bookkeeping_cpu_s: float = 0.0
    deferred: int = 0  # units waiting for GPUs that stopping groups still hold


def row_owner(row: JobRow) -> tuple[str, int | None]:
    """Whose job ``row`` is: the owner's user name and uid as its row records them (the kernel's peer credentials
    or a token, at submission). Every use of a job's owner in the service reads it here: the round's jobs
    (:func:`policy_jobs`), the group's sharing and the user its jobs run as (:mod:`scheduler.service.groups`)."""
    return row.owner, row.owner_uid if row.owner_uid >= 0 else None  # -1: a row from before owners


def policy_jobs(rows: Sequence[JobRow], now: float, held: Collection[str] = (),
                memory: Mapping[str, float | None] | None = None, owners: bool = False) -> list[Job]:
    """The policy's view of the active jobs (queued and running), in submission order; ``owners``: each job names
    its owner (only where owners change what may share: :class:`scheduler.model.owners.OwnerRule`; else every job
    is one owner's, and the round is the same as a single user's).

    ``age_s`` is the time since the job's *first* start (Sia's T); ``held`` jobs are pinned to their current
    configuration (the minimum run of :mod:`scheduler.service.stability`); ``memory``: each job's planned GPU
    memory (:func:`scheduler.service.contract.planned_gb`) in place of its declared one; its slowdown bound and
    ``exclusive`` come from its spec.
    """
    jobs = []
    for row in rows:
        spec = row.spec
        running = row.state == RUNNING
        jobs.append(Job(
            name=row.name, application=spec.app, arrival=row.submitted_at, num_gpus=spec.min_gpus,
            max_gpus=spec.max_gpus if spec.adaptive else None, batch_size=spec.batch_size,
            min_batch_size=spec.min_batch_size if spec.adaptive else None,
            max_batch_size=spec.max_batch_size if spec.adaptive else None, adaptive=spec.adaptive,
            age_s=max(now - row.started_at, 0.0) if row.started_at else 0.0, restarts=row.restarts,
            current_gpu_type=row.gpu_type if running else None, current_num_gpus=row.num_gpus if running else 0,
            current_partner=row.others[0] if running and row.others else None,
            pinned=running and row.name in held,
            requirements=replace(spec.requirements, memory_gb=(memory or {}).get(row.name)),
            owner=row_owner(row)[0] if owners else ""))
    return jobs


def without(rows: Sequence[JobRow], leaving: Collection[str]) -> list[JobRow]:
    """``rows`` as if the ``leaving`` jobs had already left their groups (a cancelled member of a pair: its
    partner's unit is then the partner alone on the same GPUs, which the round keeps)."""
    if not leaving:
        return list(rows)
    out = []
    for r in rows:
        if r.name in leaving:
            continue
        if any(o in leaving for o in r.others):
            r = replace(r, partner=",".join(o for o in r.others if o not in leaving) or None)
        out.append(r)
    return out


def unit_gpus(unit: Unit) -> set[tuple[str, int, int]]:
    """The (GPU type, node, GPU) a unit occupies."""
    return {(s.gpu_type, n, g) for s in unit for n in s.nodes for g in s.gpus}


def busy_gpus(rows: Sequence[JobRow]) -> set[tuple[str, int, int]]:
    """GPUs held by running groups, including those asked to stop that have not ended yet."""
    return {(r.gpu_type or "", n, g) for r in rows if r.state == RUNNING and r.group_key for n in r.nodes
            for g in r.gpus}


def current_placement(rows: Sequence[JobRow]) -> Placement:
    """Where running jobs are now (the placement stage keeps them there when it can)."""
    return Placement({r.name: JobPlacement(r.name, r.gpu_type or "", r.nodes, r.gpus,
                                           r.others[0] if r.others else None, r.others if len(r.others) > 1 else ())
                      for r in rows if r.state == RUNNING and r.gpu_type and r.nodes})


def current_units(rows: Sequence[JobRow]) -> dict[str, Unit]:
    """Running groups: group key -> its unit."""
    groups: dict[str, list[Slot]] = {}
    for r in rows:
        if r.state == RUNNING and r.group_key:
            groups.setdefault(r.group_key, []).append(
                Slot(r.name, r.gpu_type or "", r.num_gpus, r.batch_size or 0, tuple(sorted(r.others)), r.nodes, r.gpus))
    return {key: tuple(sorted(slots, key=lambda s: s.job)) for key, slots in groups.items()}


def desired_units(decision: RoundDecision, placement: Placement) -> list[Unit]:
    """The decision as units; allocated jobs the placement could not place are left out (they wait)."""
    by_job = decision.by_job()
    units: dict[tuple[str, ...], list[Slot]] = {}
    for a in decision.allocations:
        where = placement.of(a.job)
        if where is None:
            continue
        others = tuple(sorted(a.others))
        if any(placement.of(other) is None or other not in by_job for other in others):
            continue
        units.setdefault(tuple(sorted((a.job, *others))), []).append(
            Slot(a.job, a.gpu_type, a.num_gpus, a.batch_size, others, where.nodes, where.gpus))
    return [tuple(sorted(slots, key=lambda s: s.job)) for slots in units.values()]


@dataclass(frozen=True)
class RoundPlan:
    """What to change: groups to stop (their jobs checkpoint), units to start after that."""

    keep: tuple[str, ...]
    stop: tuple[str, ...]
    start: tuple[Unit, ...]


def plan_changes(current: Mapping[str, Unit], desired: Sequence[Unit], stop_anyway: set[str]) -> RoundPlan:
    """Keep exactly-unchanged groups; stop the rest (and ``stop_anyway``: cancelled jobs' groups); start the new."""
    wanted = {unit: None for unit in desired}
    keep, stop = [], []
    for key, unit in current.items():
        if unit in wanted and key not in stop_anyway:
            keep.append(key)
            del wanted[unit]
        else:
            stop.append(key)
    return RoundPlan(tuple(keep), tuple(stop), tuple(wanted))


def change_kind(slot: Slot, before: JobRow) -> str:
    """The event of a (re)start: started, resized, moved, repacked or restarted."""
    if before.started_at is None:
        return "started"
    if before.num_gpus and (slot.num_gpus, slot.batch_size) != (before.num_gpus, before.batch_size):
        return "resized"
    if before.gpu_type and slot.gpu_type != before.gpu_type:
        return "moved"
    if before.gpu_type and slot.others and set(slot.others) != set(before.others):
        return "repacked"  # with other partners; a job that starts alone again is restarted, not repacked
    return "restarted"


def describe(slot: Slot, key: str) -> str:
    """The detail of the event a started slot records: where it runs, with whom, in which group."""
    partner = f" with {slot.partner}" if slot.partner else ""
    return (f"{slot.num_gpus}×{slot.gpu_type} (node {','.join(map(str, slot.nodes))}, GPU "
            f"{','.join(map(str, slot.gpus))}), batch {slot.batch_size}{partner}, group {key}")
