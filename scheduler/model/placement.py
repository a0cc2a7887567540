"""Placement: turn a round's allocations into concrete nodes and GPU indices.

Allocation (the policy) decides *how many* GPUs of *which type* each job gets and who shares with whom;
placement decides *where*. It is a separate, cheap stage so the policy stays a pure optimisation.

Rules, in order:

1. A packed pair is one unit: both jobs get the same GPUs.
2. Keep units where they were (``previous`` placement) when their GPU type and count are unchanged and the
   GPUs are still free — moving a job costs a checkpoint-restore.
3. Place the remaining units largest first: multi-node units take whole free nodes; single-node units take
   the fullest node that still fits them (best fit), on an aligned block of GPU indices when one is free
   (a size-4 job on GPUs 0-3 or 4-7), which keeps nodes unfragmented for later power-of-two jobs.
4. With ``split=True`` (Sia's Gavel, which reserves exactly a rigid job's GPUs wherever they are free) a
   unit that does not fit so, or whose size is not whole nodes, takes free GPUs node by node in index order
   (``JobPlacement.layout``).
5. If a unit does not fit because kept jobs fragmented the nodes, start that GPU type over without keeping
   anything. A unit that still does not fit (possible only when ``gpus_per_node`` is not a power of two) is
   reported in ``Placement.unplaced`` rather than silently dropped.

Node indices count from 0 within a GPU type; GPU indices count from 0 within a node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.model.cluster import Cluster, GpuType
from scheduler.model.policy import Allocation, JobPlacement, Placement, RoundDecision


@dataclass
class _Unit:
    """One placement unit: a single job or a packed pair (same GPUs)."""

    members: tuple[Allocation, ...]

    @property
    def gpu_type(self) -> str:
        return self.members[0].gpu_type

    @property
    def num_gpus(self) -> int:
        return self.members[0].num_gpus

    @property
    def key(self) -> str:
        return self.members[0].job


def _units(allocations: Iterable[Allocation]) -> list[_Unit]:
    by_job = {a.job: a for a in allocations}
    done: set[str] = set()
    units: list[_Unit] = []
    for a in sorted(by_job.values(), key=lambda x: x.job):
        if a.job in done:
            continue
        others = [by_job[o] for o in a.others if o in by_job]
        if others:
            units.append(_Unit((a, *others)))
            done.update(m.job for m in (a, *others))
        else:
            units.append(_Unit((a,)))
            done.add(a.job)
    return units


class _Pool:
    """Free/used GPUs of one type."""

    def __init__(self, gpu_type: GpuType) -> None:
        self.type = gpu_type
        self.free = [[True] * gpu_type.gpus_per_node for _ in range(gpu_type.nodes)]

    def free_count(self, node: int) -> int:
        return sum(self.free[node])

    def take(self, node: int, gpus: Iterable[int]) -> None:
        for g in gpus:
            self.free[node][g] = False

    def fits_exact(self, nodes: tuple[int, ...], gpus: tuple[int, ...]) -> bool:
        return all(
            0 <= n < self.type.nodes and all(0 <= g < self.type.gpus_per_node and self.free[n][g] for g in gpus)
            for n in nodes
        )

    def fits_layout(self, nodes: tuple[int, ...], layout: tuple[tuple[int, ...], ...]) -> bool:
        return all(self.fits_exact((n,), gs) for n, gs in zip(nodes, layout))

    def find_split(self, size: int) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]] | None:
        """``size`` free GPUs taken node by node in index order (Sia's Gavel hands out workers so)."""
        nodes: list[int] = []
        layout: list[tuple[int, ...]] = []
        left = size
        for n in range(self.type.nodes):
            free = [g for g in range(self.type.gpus_per_node) if self.free[n][g]][:left]
            if free:
                nodes.append(n)
                layout.append(tuple(free))
                left -= len(free)
            if left == 0:
                return tuple(nodes), tuple(layout)
        return None

    def find(self, size: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        per_node = self.type.gpus_per_node
        if size > per_node:
            if size % per_node:
                return None
            need = size // per_node
            whole = [n for n in range(self.type.nodes) if self.free_count(n) == per_node]
            if len(whole) < need:
                return None
            return tuple(whole[:need]), tuple(range(per_node))
        # best fit: the fullest node that still has room
        candidates = [n for n in range(self.type.nodes) if self.free_count(n) >= size]
        if not candidates:
            return None
        node = min(candidates, key=lambda n: (self.free_count(n), n))
        row = self.free[node]
        for start in range(0, per_node - size + 1, size):  # aligned block first
            if all(row[start:start + size]):
                return (node,), tuple(range(start, start + size))
        return (node,), tuple([g for g in range(per_node) if row[g]][:size])


def _place_type(units: list[_Unit], gpu_type: GpuType, previous: Placement | None, keep: bool,
                split: bool = False) -> tuple[dict[str, JobPlacement], list[_Unit]]:
    pool = _Pool(gpu_type)
    placed: dict[str, JobPlacement] = {}
    pending: list[_Unit] = []

    def record(unit: _Unit, nodes: tuple[int, ...], gpus: tuple[int, ...],
               layout: tuple[tuple[int, ...], ...] = ()) -> None:
        for n, gs in zip(nodes, layout or [gpus] * len(nodes)):
            pool.take(n, gs)
        if layout and len({gs for gs in layout}) == 1 and len(layout[0]) in (1, gpu_type.gpus_per_node):
            gpus, layout = layout[0], ()  # an even layout is an ordinary placement
        elif layout:
            gpus = layout[0]
        for a in unit.members:
            placed[a.job] = JobPlacement(a.job, a.gpu_type, nodes, gpus, a.partner, a.partners, layout)

    for unit in units:
        old = None
        if keep and previous is not None:
            for a in unit.members:
                jp = previous.of(a.job)
                if jp is not None and jp.gpu_type == unit.gpu_type and jp.num_gpus == unit.num_gpus:
                    old = jp
                    break
        if old is not None and old.layout and pool.fits_layout(old.nodes, old.layout):
            record(unit, old.nodes, old.gpus, old.layout)
        elif old is not None and not old.layout and pool.fits_exact(old.nodes, old.gpus):
            record(unit, old.nodes, old.gpus)
        else:
            pending.append(unit)
    failed: list[_Unit] = []
    for unit in sorted(pending, key=lambda u: (-u.num_gpus, u.key)):
        spot = pool.find(unit.num_gpus)
        if spot is not None:
            record(unit, *spot)
            continue
        parts = pool.find_split(unit.num_gpus) if split else None
        if parts is None:
            failed.append(unit)
        else:
            record(unit, parts[0], parts[1][0], parts[1])
    return placed, failed


def place(decision: RoundDecision | Iterable[Allocation], cluster: Cluster,
          previous: Placement | None = None, split: bool = False) -> Placement:
    """Assign concrete nodes and GPU indices to every allocation (see the module docstring for the rules)."""
    allocations = decision.allocations if isinstance(decision, RoundDecision) else tuple(decision)
    units = _units(allocations)
    placed: dict[str, JobPlacement] = {}
    unplaced: list[str] = []
    for type_name, gpu_type in cluster.gpu_types.items():
        of_type = [u for u in units if u.gpu_type == type_name]
        if not of_type:
            continue
        got, failed = _place_type(of_type, gpu_type, previous, keep=True, split=split)
        if failed:  # kept jobs fragmented the nodes: place this type from scratch
            got, failed = _place_type(of_type, gpu_type, None, keep=False, split=split)
        placed.update(got)
        unplaced.extend(a.job for u in failed for a in u.members)
    unknown = [a.job for u in units if u.gpu_type not in cluster for a in u.members]
    unplaced.extend(unknown)
    return Placement(placed, tuple(sorted(unplaced)))


__all__ = ["place"]
