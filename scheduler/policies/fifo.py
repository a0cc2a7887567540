"""FIFO: first come, first served, rigid jobs, no preemption, no packing, heterogeneity-unaware.

Each round, running jobs keep their GPUs (non-preemptive); waiting jobs are started in arrival order on
the GPU type with the most free GPUs that fits them. A job that does not fit is skipped and later jobs may
start (first-fit backfilling), so one large request does not block the queue.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.model.cluster import Cluster
from scheduler.model.jobs import Job
from scheduler.model.policy import Allocation, PolicyTraits, RoundContext, RoundDecision
from scheduler.policies.common import (
    FreeGpus,
    arrival_order,
    current_shape,
    job_shapes,
    make_decision,
    single,
    unaware_type,
)


@dataclass
class FifoPolicy:
    """First-in first-out with backfilling (see the module docstring)."""

    name: str = "fifo"
    traits: PolicyTraits = PolicyTraits(max_group_size=1)

    def allocate(self, jobs: Sequence[Job], cluster: Cluster, context: RoundContext) -> RoundDecision:
        started = time.perf_counter()
        free = FreeGpus(cluster)
        allocations: list[Allocation] = []
        ordered = arrival_order(jobs)
        options = {j.name: job_shapes(j, cluster, context) for j in ordered}
        # running jobs first: they keep their type and size
        for job in ordered:
            keep = current_shape(job, options[job.name])
            if keep is not None and free.take(keep[0]):
                allocations.append(single(job, *keep))
        running = {a.job for a in allocations}
        for job in ordered:
            if job.name in running:
                continue
            choice = unaware_type(options[job.name], free)
            if choice is None:
                continue
            shape, est = options[job.name][choice]
            free.take(shape)
            allocations.append(single(job, shape, est))
        return make_decision(jobs, allocations, "fifo", time.perf_counter() - started)
