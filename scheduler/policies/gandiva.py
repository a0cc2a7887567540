"""Gandiva (OSDI'18): FIFO with opportunistic packing, introspective unpacking, heterogeneity-unaware.

When the cluster is oversubscribed (a waiting job does not fit alone), Gandiva packs it onto the GPUs of a
running job of the same size chosen *at random* (it does not know interference in advance). After a pair
has run a round, Gandiva looks at what it measured: if the pair's normalised throughput Σ ratio is below 1
(packing made the two jobs slower than taking turns), it unpacks them — the later arrival goes back to the
queue — and never pairs those two again. Jobs are rigid; running jobs are not preempted.

The "measurement" is the colocation table the simulator uses as ground truth; pairs without a row in it
cannot be measured and are not formed. Only single-node jobs are packed (both jobs on the same GPUs).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler.model.cluster import Cluster
from scheduler.model.jobs import Job
from scheduler.model.policy import Allocation, PolicyTraits, RoundContext, RoundDecision
from scheduler.policies.common import (
    FreeGpus,
    arrival_order,
    current_shape,
    job_shapes,
    make_decision,
    pair,
    single,
    unaware_type,
)


@dataclass
class GandivaPolicy:
    """Random pairing under oversubscription, unpacking pairs with Σ ratio < 1 (see the module docstring)."""

    seed: int = 0
    name: str = "gandiva"
    traits: PolicyTraits = PolicyTraits(max_group_size=2)
    bad_pairs: set[frozenset[str]] = field(default_factory=set)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _ratios(self, context: RoundContext, gpu_type: str, a: Job, b: Job) -> tuple[float, float] | None:
        if context.colocation is None:
            return None
        return context.colocation.lookup(gpu_type, a, b)

    def allocate(self, jobs: Sequence[Job], cluster: Cluster, context: RoundContext) -> RoundDecision:
        started = time.perf_counter()
        ordered = arrival_order(jobs)
        by_name = {j.name: j for j in ordered}
        options = {j.name: job_shapes(j, cluster, context) for j in ordered}
        free = FreeGpus(cluster)
        allocations: dict[str, Allocation] = {}
        requeued: set[str] = set()
        # 1. running pairs: keep good ones, unpack bad ones (the later arrival is requeued)
        for job in ordered:
            partner = by_name.get(job.current_partner or "")
            if job.name in allocations or job.name in requeued or partner is None or not job.is_running or not partner.is_running:
                continue
            keep = current_shape(job, options[job.name])
            keep_b = current_shape(partner, options[partner.name])
            if keep is None or keep_b is None or keep[0] != keep_b[0]:
                continue
            ratios = self._ratios(context, keep[0].gpu_type, job, partner)
            if ratios is None or ratios[0] + ratios[1] < 1.0:
                self.bad_pairs.add(frozenset((job.name, partner.name)))
                requeued.add(partner.name)  # ordered by arrival: the partner is the later one
                continue
            if free.take(keep[0]):
                a, b = pair(job, partner, keep[0], keep[1], keep_b[1], ratios)
                allocations[a.job], allocations[b.job] = a, b
        # 2. running singles keep their GPUs (non-preemptive), earlier arrivals first
        for job in ordered:
            if job.name in allocations or job.name in requeued or not job.is_running:
                continue
            keep = current_shape(job, options[job.name])
            if keep is not None and free.take(keep[0]):
                allocations[job.name] = single(job, *keep)
        # 3. waiting jobs in arrival order: alone if they fit, else packed with a random running job
        for job in ordered:
            if job.name in allocations:
                continue
            choice = unaware_type(options[job.name], free)
            if choice is not None:
                shape, est = options[job.name][choice]
                free.take(shape)
                allocations[job.name] = single(job, shape, est)
                continue
            candidates = []
            for host_name, host_alloc in allocations.items():
                if host_alloc.partner is not None or frozenset((job.name, host_name)) in self.bad_pairs:
                    continue
                option = options[job.name].get(host_alloc.gpu_type)
                if option is None or option[0].nodes != 1 or host_alloc.num_nodes != 1:
                    continue
                if option[0].gpus != host_alloc.num_gpus:
                    continue
                ratios = self._ratios(context, host_alloc.gpu_type, by_name[host_name], job)
                if ratios is None or ratios[0] <= 0 or ratios[1] <= 0:
                    continue
                candidates.append((host_name, ratios))
            if not candidates:
                continue
            host_name, ratios = candidates[self.rng.randrange(len(candidates))]
            host = by_name[host_name]
            host_shape, host_est = options[host_name][allocations[host_name].gpu_type]
            a, b = pair(host, job, host_shape, host_est, options[job.name][host_shape.gpu_type][1], ratios)
            allocations[a.job], allocations[b.job] = a, b
        return make_decision(jobs, allocations.values(), "gandiva", time.perf_counter() - started)
