"""Tiresias (NSDI'19): discretised two-dimensional least-attained-service, rigid jobs, no packing.

A job's attained service is GPU-seconds (GPUs × time it has held them), the 2D in 2D-LAS. Jobs fall into
queues by attained service (thresholds ``queue_thresholds_gpu_s``; default 1 and 10 GPU-hours, i.e. three
queues); lower queues go first and jobs inside a queue go by arrival (Tiresias's FIFO within a queue).
Every round the whole order is recomputed and jobs are (re)admitted greedily, so a job that drops to a
lower-priority queue can be preempted by newer, less-served jobs. Placement is heterogeneity-unaware: a
running job stays on its type; others go to the type with the most free GPUs.

Attained service is the policy's own bookkeeping of what it allocated (it assumes each allocation ran for
the round), so the policy needs no simulator internals.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler.model.cluster import Cluster
from scheduler.model.jobs import Job
from scheduler.model.policy import Allocation, PolicyTraits, RoundContext, RoundDecision
from scheduler.policies.common import FreeGpus, current_shape, job_shapes, make_decision, single, unaware_type


@dataclass
class TiresiasPolicy:
    """Discretised 2D-LAS (see the module docstring)."""

    queue_thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0)
    name: str = "tiresias"
    traits: PolicyTraits = PolicyTraits(max_group_size=1)
    attained_gpu_s: dict[str, float] = field(default_factory=dict)

    def queue_of(self, job: Job) -> int:
        served = self.attained_gpu_s.get(job.name, 0.0)
        return sum(1 for limit in self.queue_thresholds_gpu_s if served >= limit)

    def allocate(self, jobs: Sequence[Job], cluster: Cluster, context: RoundContext) -> RoundDecision:
        started = time.perf_counter()
        live = {j.name for j in jobs}
        self.attained_gpu_s = {k: v for k, v in self.attained_gpu_s.items() if k in live}
        ordered = sorted(jobs, key=lambda j: (not j.pinned, self.queue_of(j), j.arrival, j.name))
        free = FreeGpus(cluster)
        allocations: list[Allocation] = []
        for job in ordered:
            options = job_shapes(job, cluster, context)
            keep = current_shape(job, options)
            choice = keep[0].gpu_type if keep is not None and free.fits(keep[0]) else unaware_type(options, free)
            if choice is None:
                continue
            shape, est = options[choice]
            free.take(shape)
            allocations.append(single(job, shape, est))
        for a in allocations:
            self.attained_gpu_s[a.job] = self.attained_gpu_s.get(a.job, 0.0) + a.num_gpus * context.round_duration_s
        return make_decision(jobs, allocations, "tiresias", time.perf_counter() - started)
