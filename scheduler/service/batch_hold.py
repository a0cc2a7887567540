"""A running job's batch size changes only when the change pays for its restarts (``colocate serve``).

The policy picks an adaptive job's batch from the goodput model: the best batch on each configuration. In the
simulator, as in Sia's, a new batch on the same GPUs is free. Live it is not: ``serve`` enacts any change of a
group by restarting the group (checkpoint, stop, start), so a new batch for one job restarts every member.
Measured rates at neighbouring batches are often within noise of each other (a ResNet-18 at batch 32 and 64 on
one logical GPU of a 2-core CPU machine: 15.2 and 15.6 samples/s), and a model that takes whichever is best at
the moment flips the batch, and restarts the group, each time a measurement nudges the estimates.

So on a running job's *current* GPU type and count, :class:`HeldBatchModel` answers with the job's current
batch unless the best batch's goodput beats it by the factor :func:`batch_holds` computes::

    need = (1 + keep_bonus) / Π_m f_m        f_m = max(T_m − N_m·S, 0) / (T_m + S)   (Sia's restart factor)

over every member ``m`` of the job's group (the job and its partners all restart), ``S`` the policy's restart
cost. A job, or a partner, within its minimum run (pinned) never changes batch: ``need = ∞``. Elsewhere (a new
GPU type or count: a restart anyway) the model's best batch is used unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from scheduler.ilp.columns import restart_factor
from scheduler.model.goodput import EstimateArrays, GoodputEstimate, GoodputWrapper, estimate_arrays
from scheduler.model.jobs import Job

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.configs import Configuration


class BatchAwareModel(Protocol):
    """A goodput model that also answers at one given batch (``LearnedGoodputModel``)."""

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None: ...

    def throughput(self, application: str, gpu_type: str, num_gpus: int, batch_size: int,
                   num_nodes: int = 1) -> float | None: ...

    def at_batch(self, job: Job, gpu_type: str, num_gpus: int, batch: int,
                 num_nodes: int = 1) -> GoodputEstimate | None: ...


@dataclass(frozen=True)
class BatchHold:
    """Where a running adaptive job runs, its batch there, and the goodput ratio a new batch must beat."""

    gpu_type: str
    num_gpus: int
    batch_size: int
    need: float  # best / current goodput a change must exceed; math.inf: never


def batch_holds(jobs: Sequence[Job], batches: Mapping[str, int], groups: Mapping[str, Sequence[str]],
                restart_cost_s: float, keep_bonus: float) -> dict[str, BatchHold]:
    """The hold of every running adaptive job of ``jobs`` (the policy's view: age, restarts, pinned).

    ``batches``: each running job's current batch; ``groups``: each running job's partners (what restarts
    with it). Rigid jobs keep their batch anyway and get no hold.
    """
    by_name = {job.name: job for job in jobs}
    holds = {}
    for job in jobs:
        batch = batches.get(job.name)
        if not (job.adaptive and job.is_running and batch):
            continue
        members = [by_name[m] for m in (job.name, *groups.get(job.name, ())) if m in by_name]
        kept = 0.0 if any(m.pinned for m in members) else math.prod(restart_factor(m, restart_cost_s) for m in members)
        need = (1.0 + keep_bonus) / kept if kept > 0 else math.inf
        holds[job.name] = BatchHold(job.current_gpu_type or "", job.current_num_gpus, batch, need)
    return holds


class HeldBatchModel(GoodputWrapper):
    """``inner``'s estimates, with each held job's current batch kept on its current GPUs (module docstring)."""

    def __init__(self, inner: BatchAwareModel, holds: Mapping[str, BatchHold]) -> None:
        super().__init__(inner)
        self.model = inner  # what at_batch is asked of
        self.holds = dict(holds)

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None:
        return self._held(job, gpu_type, num_gpus, num_nodes, self.inner.estimate(job, gpu_type, num_gpus, num_nodes))

    def estimate_arrays(self, job: Job, configs: Sequence[Configuration]) -> EstimateArrays:
        arrays = estimate_arrays(self.inner, job, configs)
        hold = self.holds.get(job.name)
        if hold is None:
            return arrays
        columns = {name: np.array(getattr(arrays, name), dtype=float)
                   for name in ("goodput", "batch_size", "throughput", "efficiency")}
        changed = False
        for i, c in enumerate(configs):
            if (c.gpu_type, c.num_gpus) != (hold.gpu_type, hold.num_gpus):
                continue
            kept = self._held(job, c.gpu_type, c.num_gpus, c.num_nodes, arrays.at(i))
            if kept is not None and kept.batch_size != columns["batch_size"][i]:
                columns["goodput"][i], columns["batch_size"][i] = kept.goodput, kept.batch_size
                columns["throughput"][i], columns["efficiency"][i] = kept.throughput, kept.efficiency
                changed = True
        return replace(arrays, **columns) if changed else arrays

    def _held(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int,
              best: GoodputEstimate | None) -> GoodputEstimate | None:
        hold = self.holds.get(job.name)
        if (hold is None or best is None or best.batch_size == hold.batch_size
                or (gpu_type, num_gpus) != (hold.gpu_type, hold.num_gpus)):
            return best
        current = self.model.at_batch(job, gpu_type, num_gpus, hold.batch_size, num_nodes)
        if current is None or current.goodput <= 0 or best.goodput > current.goodput * hold.need:
            return best
        return current
