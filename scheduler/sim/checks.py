"""Per-round invariants of the simulator: a violation raises :class:`SimulationError` naming round and job.

:func:`check_round` (the decision): every active job exactly once, no finished or unknown job, capacity per
GPU type, groups of at most :data:`MAX_GROUP` jobs whose members all name each other on the same
configuration, rigid jobs at least their requested size. :func:`check_placement` (where it runs): at most
three jobs per GPU and only declared group members, all on exactly the same GPUs. :func:`check_group_memory`
(what runs): the members of every pair or group of three fit together in one GPU's memory at the local
batches they run (:class:`scheduler.sim.job_model.MemoryModel`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from scheduler.model.cluster import Cluster
from scheduler.model.jobs import Job
from scheduler.model.memory import MEMORY_HEADROOM
from scheduler.model.policy import Placement, RoundDecision, check_decision

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.sim.job_model import MemoryModel


MAX_GROUP = 3  # jobs on one GPU set: the ILP packs pairs and groups of three (IlpConfig.max_group_size)


class SimulationError(AssertionError):
    """An invariant broke; the message names the round, the simulated time and the job."""


def check_round(round_index: int, time_s: float, decision: RoundDecision, jobs: Sequence[Job],
                cluster: Cluster, finished: set[str], placement: Placement | None = None,
                rigid_sizes: Mapping[str, int] | None = None) -> None:
    """Raise :class:`SimulationError` (naming round and job) if ``decision``/``placement`` break an invariant."""
    where = f"round {round_index} (t={time_s:.0f} s)"

    def fail(job: str, message: str) -> SimulationError:
        return SimulationError(f"{where}: job {job}: {message}")

    active = {j.name for j in jobs}
    seen: dict[str, str] = {}
    for a in decision.allocations:
        if a.job in seen:
            raise fail(a.job, "allocated twice")
        seen[a.job] = "allocated"
    for name in decision.unallocated:
        if name in seen:
            raise fail(name, f"both {seen[name]} and unallocated")
        seen[name] = "unallocated"
    for name in seen:
        if name in finished:
            raise fail(name, "already finished but still scheduled")
        if name not in active:
            raise fail(name, "not an active job")
    for name in sorted(active - set(seen)):
        raise fail(name, "lost: neither allocated nor unallocated")
    alloc = decision.by_job()
    for a in decision.allocations:
        if a.gpu_type not in cluster:
            raise fail(a.job, f"unknown GPU type {a.gpu_type!r}")
        if a.num_gpus < 1:
            raise fail(a.job, f"{a.num_gpus} GPUs")
        if rigid_sizes is not None and a.num_gpus < rigid_sizes.get(a.job, 0):
            raise fail(a.job, f"rigid job of {rigid_sizes[a.job]} GPUs given {a.num_gpus}")
        if len(a.others) >= MAX_GROUP or len(set(a.others)) != len(a.others) or a.job in a.others:
            raise fail(a.job, f"shares GPUs with {list(a.others)}: a group holds at most {MAX_GROUP} distinct jobs")
        if a.partner is not None and a.partner not in a.others:
            raise fail(a.job, f"partner {a.partner} is not one of its group {list(a.others)}")
        group = {a.job, *a.others}
        for other in a.others:
            b = alloc.get(other)
            if b is None or {b.job, *b.others} != group:
                raise fail(a.job, f"partner {other} does not pair back" if len(group) == 2 else
                           f"group member {other} does not name the same group {sorted(group)}")
            if (b.gpu_type, b.num_gpus, b.num_nodes) != (a.gpu_type, a.num_gpus, a.num_nodes):
                raise fail(a.job, f"{'pair' if len(group) == 2 else 'group'} configurations differ from "
                                  f"partner {other}")
    for gpu_type, used in decision.gpus_used().items():
        if used > cluster.capacity(gpu_type):
            names = sorted(a.job for a in decision.allocations if a.gpu_type == gpu_type)
            raise fail(names[-1], f"{gpu_type}: {used} GPUs allocated > capacity {cluster.capacity(gpu_type)} "
                                  f"(jobs {', '.join(names)})")
    try:
        check_decision(decision, jobs, cluster)
    except AssertionError as err:
        raise SimulationError(f"{where}: {err}") from None
    if placement is not None:
        check_placement(round_index, time_s, decision, placement)


def check_placement(round_index: int, time_s: float, decision: RoundDecision, placement: Placement) -> None:
    """Raise :class:`SimulationError` if ``placement`` does not realise a decision that passed :func:`check_round`."""
    where = f"round {round_index} (t={time_s:.0f} s)"

    def fail(job: str, message: str) -> SimulationError:
        return SimulationError(f"{where}: job {job}: {message}")

    alloc = decision.by_job()
    for slot, names in placement.occupants().items():
        if len(names) > MAX_GROUP:
            raise fail(names[0], f"GPU {slot} shared by {len(names)} jobs {names}")
        for name in names:
            strangers = [n for n in names if n != name and n not in alloc[name].others]
            if strangers:
                raise fail(name, f"shares GPU {slot} with {strangers[0]}, which is not its partner")
    for name, jp in placement.jobs.items():
        a = alloc.get(name)
        if a is None:
            raise fail(name, "placed without an allocation")
        if jp.gpu_type != a.gpu_type or jp.num_gpus != a.num_gpus:
            raise fail(name, f"placed on {jp.num_gpus}x{jp.gpu_type}, allocated {a.num_gpus}x{a.gpu_type}")
        for partner in a.others:
            other = placement.jobs.get(partner)
            if other is not None and (other.gpu_type, other.nodes, other.gpus) != (jp.gpu_type, jp.nodes, jp.gpus):
                raise fail(name, f"{'pair' if len(a.others) == 1 else 'group'} with {partner} is not on the same GPUs")


def check_group_memory(round_index: int, time_s: float, gpu_type: str, members: Sequence[tuple[str, str, float]],
                       memory: MemoryModel) -> None:
    """Raise unless the members ``(job, application, local batch)`` of a pair or group of three fit together
    on one GPU of ``gpu_type``."""
    if memory.group_fits(gpu_type, *((app, local) for _, app, local in members)):
        return
    sizes = " + ".join(f"{memory.footprint_gb(app, gpu_type, local) or float('nan'):.1f}" for _, app, local in members)
    others = " and ".join(job for job, _, _ in members[1:])
    raise SimulationError(
        f"round {round_index} (t={time_s:.0f} s): job {members[0][0]}: packed with {others} on {gpu_type} needs "
        f"{sizes} GB (+ {MEMORY_HEADROOM:.0%} each) + {len(members)} x {memory.context_gb} GB context > "
        f"{memory.cluster[gpu_type].memory_gb} GB")


__all__ = ["MAX_GROUP", "SimulationError", "check_group_memory", "check_placement", "check_round"]
