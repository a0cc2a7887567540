"""Helpers shared by the baseline policies: rigid shapes, a node-level free-GPU tracker, goodput lookups.

Baselines (FIFO, Tiresias, Gandiva, Gavel) run *rigid* jobs: the GPU count and batch the user asked for.
A rigid job of ``n`` GPUs on a type with ``R`` GPUs per node takes ``n`` GPUs of one node when ``n ≤ R``,
else ``ceil(n / R)`` whole nodes (the GPUs left on the last node are reserved and idle, as in Sia's and
Gavel's simulators). :class:`FreeGpus` tracks free GPUs per node so that greedy policies only hand out
allocations the placement stage (:func:`scheduler.model.placement.place`) can realise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.model.cluster import Cluster, GpuType
from scheduler.model.configs import Configuration
from scheduler.model.goodput import GoodputEstimate, estimate_arrays
from scheduler.model.jobs import Job
from scheduler.model.policy import Allocation, RoundContext, RoundDecision, SolverInfo


@dataclass(frozen=True)
class Shape:
    """What a rigid job occupies on one GPU type: ``gpus`` reserved over ``nodes`` nodes."""

    gpu_type: str
    gpus: int
    nodes: int


def rigid_shape(num_gpus: int, gpu_type: GpuType) -> Shape | None:
    """The shape of a rigid ``num_gpus`` job on ``gpu_type`` (None when the type is too small)."""
    per_node = gpu_type.gpus_per_node
    if num_gpus <= per_node:
        return Shape(gpu_type.name, num_gpus, 1)
    nodes = math.ceil(num_gpus / per_node)
    if nodes > gpu_type.nodes:
        return None
    return Shape(gpu_type.name, nodes * per_node, nodes)


class FreeGpus:
    """Free GPUs per node of every type; ``take`` reserves a shape best-fit (as the placement stage does)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.free = {t.name: [t.gpus_per_node] * t.nodes for t in cluster}

    def total_free(self, gpu_type: str) -> int:
        return sum(self.free.get(gpu_type, ()))

    def _spot(self, shape: Shape) -> list[int] | None:
        nodes = self.free.get(shape.gpu_type)
        if nodes is None:
            return None
        per_node = self.cluster[shape.gpu_type].gpus_per_node
        if shape.nodes > 1:
            whole = [i for i, f in enumerate(nodes) if f == per_node]
            return whole[: shape.nodes] if len(whole) >= shape.nodes else None
        fits = [i for i, f in enumerate(nodes) if f >= shape.gpus]
        if not fits:
            return None
        return [min(fits, key=lambda i: (nodes[i], i))]

    def fits(self, shape: Shape) -> bool:
        return self._spot(shape) is not None

    def take(self, shape: Shape) -> bool:
        """Reserve ``shape``; False (and nothing reserved) when it does not fit."""
        spot = self._spot(shape)
        if spot is None:
            return False
        per_node = self.cluster[shape.gpu_type].gpus_per_node
        for i in spot:
            self.free[shape.gpu_type][i] -= per_node if shape.nodes > 1 else shape.gpus
        return True


def rigid_job(job: Job) -> Job:
    """The job as a rigid request (baselines ignore adaptivity)."""
    return job if not job.adaptive else job.with_state(adaptive=False)


def job_shapes(job: Job, cluster: Cluster, context: RoundContext) -> dict[str, tuple[Shape, GoodputEstimate]]:
    """Every GPU type where the rigid job can run: type → (shape, solo estimate).

    The job uses its own GPU count (extra GPUs reserved by a multi-node shape idle); all types are
    estimated in one goodput call, since baselines ask this for every job every round.
    """
    shapes: list[Shape] = []
    for t in cluster:
        if job.requirements.memory_gb is not None and job.requirements.memory_gb > t.memory_gb:
            continue
        shape = rigid_shape(job.num_gpus, t)
        if shape is not None:
            shapes.append(shape)
    if not shapes:
        return {}
    configs = [Configuration(s.gpu_type, s.nodes, min(job.num_gpus, s.gpus)) for s in shapes]
    estimates = estimate_arrays(context.goodput, rigid_job(job), configs)
    out: dict[str, tuple[Shape, GoodputEstimate]] = {}
    for i, shape in enumerate(shapes):
        est = estimates.at(i)
        if est is not None and est.goodput > 0:
            out[shape.gpu_type] = (shape, est)
    return out


def unaware_type(options: Mapping[str, tuple[Shape, GoodputEstimate]], free: FreeGpus,
                 prefer: str | None = None) -> str | None:
    """A heterogeneity-unaware choice: ``prefer`` (the job's current type) if it fits, else the type with the
    most free GPUs that fits (ties: cluster order)."""
    if prefer is not None and prefer in options and free.fits(options[prefer][0]):
        return prefer
    fitting = [t for t, (shape, _) in options.items() if free.fits(shape)]
    if not fitting:
        return None
    order = {t: i for i, t in enumerate(free.cluster.type_names)}
    return max(fitting, key=lambda t: (free.total_free(t), -order[t]))


def single(job: Job, shape: Shape, est: GoodputEstimate) -> Allocation:
    return Allocation(job=job.name, gpu_type=shape.gpu_type, num_gpus=shape.gpus, batch_size=int(est.batch_size),
                      partner=None, expected_goodput=float(est.goodput), num_nodes=shape.nodes)


def pair(job_a: Job, job_b: Job, shape: Shape, est_a: GoodputEstimate, est_b: GoodputEstimate,
         ratios: tuple[float, float]) -> tuple[Allocation, Allocation]:
    a = Allocation(job_a.name, shape.gpu_type, shape.gpus, int(est_a.batch_size), job_b.name,
                   float(est_a.goodput * ratios[0]), shape.nodes)
    b = Allocation(job_b.name, shape.gpu_type, shape.gpus, int(est_b.batch_size), job_a.name,
                   float(est_b.goodput * ratios[1]), shape.nodes)
    return a, b


def make_decision(jobs: Sequence[Job], allocations: Iterable[Allocation], solver: str, time_s: float,
                  objective: float = 0.0, status: str = "Heuristic") -> RoundDecision:
    """A :class:`RoundDecision` with every job not in ``allocations`` listed as unallocated."""
    allocs = tuple(allocations)
    placed = {a.job for a in allocs}
    unallocated = tuple(j.name for j in jobs if j.name not in placed)
    return RoundDecision(allocs, unallocated, objective, SolverInfo(solver, status, objective, time_s))


def arrival_order(jobs: Sequence[Job]) -> list[Job]:
    """Jobs by arrival time, then name (deterministic FIFO order)."""
    return sorted(jobs, key=lambda j: (j.arrival, j.name))


def current_shape(job: Job, options: Mapping[str, tuple[Shape, GoodputEstimate]]) -> tuple[Shape, GoodputEstimate] | None:
    """The job's present (type, shape) if it is running on a type it can still use."""
    gpu_type = job.current_gpu_type
    if not job.is_running or gpu_type is None or gpu_type not in options:
        return None
    return options[gpu_type]
