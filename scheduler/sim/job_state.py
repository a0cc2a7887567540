"""Per-job state of a simulation, its initial size (work), and the integration of one round."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from common.errors import InputError
from scheduler.formats.workload_jobs import WorkloadJob
from scheduler.ilp.config import IlpConfig
from scheduler.model.jobs import Job, slowdown_bound
from scheduler.model.policy import Allocation

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.cluster import Cluster
    from scheduler.model.policy import Policy
    from scheduler.sim.job_model import AccumulatingGoodput


@dataclass
class JobState:
    spec: WorkloadJob
    work: float                      # useful samples to finish
    m0: float                        # samples per unit of progress (the reference curve's batch size)
    done: float = 0.0
    status: str = "pending"          # pending -> active -> done
    start: float | None = None
    completion: float | None = None
    starts: int = 0
    restarts: int = 0
    delay: float = 0.0               # checkpoint-restore time still to pay
    alloc: Allocation | None = None
    slot_key: tuple | None = None    # what a change of costs a restart (SimConfig.restart_on)
    slots: tuple | None = None       # the nodes and GPUs it runs on
    gpu_s: float = 0.0
    run_s: float = 0.0
    packed_s: float = 0.0
    bound: float | None = None       # the slowdown it accepts in a group (its own, else the cluster-wide one)
    worst_slowdown: float = 1.0      # the largest solo / co-located rate it ran at in a group (1: never slowed)
    over_bound_s: float = 0.0        # seconds it ran in a group slower than its bound
    rate: float = 0.0                # useful samples/s it ran at last (0: not run yet)

    def remaining_s(self) -> float | None:
        """Seconds its remaining work takes at the rate it ran at last (None before it ran)."""
        return (self.work - self.done) / self.rate if self.rate > 0 else None

    def note_slowdown(self, solo: float, packed: float, seconds: float) -> None:
        """A stretch of ``seconds`` run in a group at ``packed`` of its ``solo`` rate (the truth, not the belief)."""
        if seconds <= 0 or not packed > 0:
            return
        slowdown = solo / packed
        self.worst_slowdown = max(self.worst_slowdown, slowdown)
        if self.bound is not None and slowdown > self.bound * (1 + 1e-9):
            self.over_bound_s += seconds


@dataclass
class Member:
    """One job of a unit (a single job, or one member of a pair or group of three) during one round.

    ``ratios`` maps the set of unit members computing at once (two or three names, itself included) to this
    job's co-location ratio among them; alone it runs at ``solo``. ``packed`` is its rate with the whole unit.
    """

    state: JobState
    delay: float
    solo: float
    packed: float
    remaining: float
    finish: float | None = None
    run_s: float = 0.0
    packed_s: float = 0.0
    batch: int = 0
    batches: tuple[int, ...] = ()  # every batch it ran in the round, in order (a job alone re-reads its batch)
    ratios: Mapping[frozenset[str], float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.state.spec.name

    def rate(self, computing: frozenset[str]) -> float:
        """Samples/s while exactly ``computing`` (a set holding this job) run on the unit's GPUs."""
        return self.solo if len(computing) <= 1 else self.solo * self.ratios[computing]


@dataclass(frozen=True)
class UnitTimes:
    """What one unit did in a round: how long it held its GPUs (its last member's end), how long two or more
    members were there (``shared``) and how long three (``triple``); ``gpu_share[name]``: each member's
    share of that time, the GPUs split evenly among the members present."""

    held: float
    shared: float
    triple: float
    gpu_share: Mapping[str, float]


def _probe(spec: WorkloadJob, gpus: int, batch: int | None) -> Job:
    return Job(name=spec.name, application=spec.application, arrival=spec.arrival, num_gpus=gpus,
               batch_size=batch, adaptive=False)


def _reference_rate(spec: WorkloadJob, goodput: AccumulatingGoodput, cluster: Cluster, slowdown: float
                    ) -> float | None:
    """Solo useful samples/s at the job's request on the first GPU type where it runs."""
    from scheduler.policies.common import rigid_shape

    for t in cluster:
        shape = rigid_shape(spec.num_gpus, t)
        if shape is None:
            continue
        est = goodput.estimate(_probe(spec, spec.num_gpus, spec.batch_size), t.name, spec.num_gpus, shape.nodes)
        if est is not None and est.goodput > 0:
            return est.goodput / slowdown
    return None


def initial_state(spec: WorkloadJob, goodput: AccumulatingGoodput, cluster: Cluster, slowdown: float,
                  source: str | Path) -> JobState:
    """A pending job sized as Sia sizes it (the reference curve's end), or by the workload's work/duration."""
    curve = goodput.curves.get(spec.application)
    m0 = float(curve.init_batch_size) if curve is not None else 1.0
    runnable = any(goodput.estimate(_probe(spec, 1, None), t.name, 1, 1) is not None for t in cluster) \
        or _reference_rate(spec, goodput, cluster, slowdown) is not None
    if not runnable:
        raise InputError(f"job {spec.name}: application {spec.application!r} has no throughput profile on "
                         f"any GPU type of the cluster ({', '.join(cluster.type_names)})", source=source,
                         field="application", valid="an application with profiles for the cluster's GPU types")
    if spec.work is not None:
        work = float(spec.work)
    elif spec.duration_s is not None:
        rate = _reference_rate(spec, goodput, cluster, slowdown)
        if rate is None:
            raise InputError(f"job {spec.name}: cannot run {spec.num_gpus} GPUs of {spec.application} on any "
                             f"GPU type to size it from its duration", source=source,
                             field="duration", valid="a request that fits the cluster")
        work = rate * float(spec.duration_s)
    elif curve is not None:
        work = float(curve.max_progress) * m0
    else:
        raise InputError(f"job {spec.name}: application {spec.application!r} has no GNS curve to size it",
                         source=source, field="work",
                         valid="a work or duration column, or an application with validation-*.csv curves")
    return JobState(spec=spec, work=work, m0=m0)


def advance(units: list[Member], R: float) -> UnitTimes:
    """Integrate one unit (a single job, a pair or a group of three) over a round of ``R`` seconds.

    A member earns nothing while restoring (``delay``); while others compute too it runs at its ratio among
    exactly those (the pair's ratio once the third has finished or while it restores), alone at ``solo``.
    The integration is piecewise between events (a restore ending, a member finishing); finish times are
    exact within the round.
    """
    t = 0.0
    for _ in range(8 * len(units)):  # at most a handful of events: one delay end and one finish per member
        alive = [u for u in units if u.finish is None]
        if not alive or t >= R - 1e-9:
            break
        computing = frozenset(u.name for u in alive if t >= u.delay - 1e-12)
        rates = {id(u): u.rate(computing) if u.name in computing else 0.0 for u in alive}
        nxt = R
        for u in alive:
            if u.name not in computing:
                nxt = min(nxt, u.delay)
            elif rates[id(u)] > 0:
                nxt = min(nxt, t + u.remaining / rates[id(u)])
        dt = max(nxt - t, 0.0)
        for u in alive:
            rate = rates[id(u)]
            if rate > 0:
                u.remaining -= rate * dt
                u.run_s += dt
                if len(computing) >= 2:
                    u.packed_s += dt
            if u.remaining <= 1e-9 * max(1.0, abs(u.remaining) + rate * dt):
                u.remaining = 0.0
                u.finish = nxt
        t = nxt
    return _unit_times(units, R)


def _unit_times(units: list[Member], R: float) -> UnitTimes:
    """Held, shared and triple time of a unit from its members' ends, and each member's GPU-time share."""
    ends = {u.name: u.finish if u.finish is not None else R for u in units}
    order = sorted(ends.values(), reverse=True)  # latest first
    shared = order[1] if len(order) >= 2 else 0.0
    triple = order[2] if len(order) >= 3 else 0.0
    share: dict[str, float] = {}
    for name, end in ends.items():
        start, total = 0.0, 0.0
        for edge in sorted(set(ends.values())):  # between edges the members still there split the GPUs
            if start >= end:
                break
            present = sum(1 for e in ends.values() if e > start)
            total += (min(edge, end) - start) / present
            start = edge
        share[name] = total
    return UnitTimes(order[0], shared, triple, share)



def cluster_bound(policy: "Policy", fallback: float | None = IlpConfig().max_slowdown) -> float | None:
    """The slowdown bound a run's groups are measured against: the policy's own (an ILP policy keeps one), else
    ``fallback``: the cluster-wide default of :class:`scheduler.ilp.config.IlpConfig` (baselines keep none, but a
    job in a group beyond it is slowed past what the cluster promises), ``serve``'s ILP's there. A job's own bound
    comes first: :func:`scheduler.model.jobs.slowdown_bound`."""
    return slowdown_bound(policy.traits.max_slowdown, fallback)


__all__ = ["JobState", "Member", "UnitTimes", "advance", "cluster_bound", "initial_state"]
