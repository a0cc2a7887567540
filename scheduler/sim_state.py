"""Per-job state of a simulation, its initial size (work), and the integration of one round."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from profiler.errors import InputError
from scheduler.jobs import Job
from scheduler.policy import Allocation
from scheduler.workloads import WorkloadJob

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.cluster import Cluster
    from scheduler.sim_models import AccumulatingGoodput


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


@dataclass
class Member:
    """One job of a unit (a single job or one member of a pair) during one round."""

    state: JobState
    delay: float
    solo: float
    packed: float
    remaining: float
    finish: float | None = None
    run_s: float = 0.0
    packed_s: float = 0.0
    batch: int = 0


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
    curve = (getattr(goodput, "curves", None) or {}).get(spec.application)
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


def advance(units: list[Member], R: float) -> tuple[float, float]:
    """Integrate one single job or pair over a round; returns (GPU-holding time, time both were present).

    A member earns nothing while restoring (``delay``); it runs at ``packed`` while its partner is also
    running, else at ``solo``. Finish times are exact within the round.
    """
    t = 0.0
    for _ in range(16):  # at most a handful of events: two delays ends and two finishes
        alive = [u for u in units if u.finish is None]
        if not alive or t >= R - 1e-9:
            break
        computing = [u for u in alive if t >= u.delay - 1e-12]
        rates = {}
        for u in alive:
            if u not in computing:
                rates[id(u)] = 0.0
            else:
                rates[id(u)] = u.packed if len(computing) == 2 else u.solo
        nxt = R
        for u in alive:
            if u not in computing:
                nxt = min(nxt, u.delay)
            elif rates[id(u)] > 0:
                nxt = min(nxt, t + u.remaining / rates[id(u)])
        dt = max(nxt - t, 0.0)
        for u in alive:
            rate = rates[id(u)]
            if rate > 0:
                u.remaining -= rate * dt
                u.run_s += dt
                if len(computing) == 2:
                    u.packed_s += dt
            if u.remaining <= 1e-9 * max(1.0, abs(u.remaining) + rate * dt):
                u.remaining = 0.0
                u.finish = nxt
        t = nxt
    ends = [u.finish if u.finish is not None else R for u in units]
    both = min(ends) if len(units) == 2 else 0.0
    return max(ends), both


__all__ = ["JobState", "Member", "advance", "initial_state"]
