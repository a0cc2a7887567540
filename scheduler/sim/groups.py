"""Units of jobs sharing GPUs in the simulator: a pair or a group of three (``IlpConfig.max_group_size=3``).

:func:`group_members` turns the members of one unit into the :class:`scheduler.sim.job_state.Member` records that
:func:`scheduler.sim.job_state.advance` integrates. Each member's rate is its solo rate times its ratio among the
members computing at that moment: the whole group's ratios while all are there, the pair's ratios (from the
table) once a third member has finished or while it restores, solo when alone. The ratios come from the
colocation table the policy reads (:meth:`scheduler.model.colocation.ColocationTable.group_ratios`; a group of
three's are predicted from its pairs, :data:`scheduler.model.colocation.TRIPLE_RATIOS`), so the simulation and
the ILP agree on what a group is worth. With memory on, the members' micro-batches are shrunk until all fit
on one GPU together and the unit is checked (:func:`scheduler.sim.checks.check_group_memory`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import TYPE_CHECKING, Any, Protocol

from scheduler.model.jobs import Job
from scheduler.sim.checks import SimulationError, check_group_memory
from scheduler.sim.job_state import JobState, Member

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.colocation import ColocationTable
    from scheduler.sim.config import SimConfig
    from scheduler.sim.job_model import AccumulatingGoodput, MemoryModel


class Simulator(Protocol):
    """What grouping reads of :class:`scheduler.sim.simulator.Simulator` (which imports this module)."""

    config: SimConfig
    goodput: AccumulatingGoodput
    memory: MemoryModel | None
    colocation: ColocationTable | None

    def _rate(self, *args: Any, **kwargs: Any) -> Any: ...

    def _local_batch(self, *args: Any, **kwargs: Any) -> Any: ...


def subgroup_ratios(sim: Simulator, where: str, gpu_type: str, jobs: Sequence[Job]
                    ) -> dict[str, dict[frozenset[str], float]]:
    """``{member: {set of members computing: its ratio}}`` for every sub-group of two or more members."""
    out: dict[str, dict[frozenset[str], float]] = {j.name: {} for j in jobs}
    for size in range(len(jobs), 1, -1):
        for sub in combinations(jobs, size):
            ratios = sim.colocation.group_ratios(gpu_type, sub) if sim.colocation is not None else None
            if ratios is None or min(ratios) <= 0:
                others = " and ".join(j.name for j in sub[1:])
                memory = f" (or the {'pair' if size == 2 else 'group'} does not fit in memory)" if sim.memory else ""
                raise SimulationError(f"{where}: job {sub[0].name}: packed with {others} on {gpu_type} without a "
                                      f"feasible co-location ratio{memory}")
            key = frozenset(j.name for j in sub)
            for j, r in zip(sub, ratios):
                out[j.name][key] = float(r)
    return out


def group_members(sim: Simulator, round_index: int, time_s: float, members: list[JobState],
                  views: Mapping[str, Job]) -> list[Member]:
    """Rates of a pair or group of three: ratios from the table, micro-batches shrunk until all fit in memory."""
    a = members[0].alloc
    assert a is not None
    where = f"round {round_index} (t={time_s:.0f} s)"
    names = [m.spec.name for m in members]
    ratios = subgroup_ratios(sim, where, a.gpu_type, [views[n] for n in names])
    solo = [sim._rate(m, m.alloc) for m in members]
    if sim.memory is not None:
        local = [sim._local_batch(m, m.alloc, b) for m, (_, b) in zip(members, solo)]
        apps = [m.spec.application for m in members]
        # the micro-batch each runs: capped, but never below the smallest profiled (see accumulated())
        floor = [min((sim.goodput.local_batch_range(app, a.gpu_type) or (1.0, 1.0))[0], x)
                 for app, x in zip(apps, local)]
        fit = sim.memory.group_locals(a.gpu_type, *zip(apps, local), floors=floor)
        caps: list[float | None] = [None] * len(members)
        if tuple(fit) != tuple(local):
            caps = [float(x) for x in fit]
            solo = [sim._rate(m, m.alloc, c) for m, c in zip(members, caps)]
        run_local = [min(x, max(c, f)) if c is not None else x for x, c, f in zip(local, caps, floor)]
        check_group_memory(round_index, time_s, a.gpu_type, list(zip(names, apps, run_local)), sim.memory)
    whole = frozenset(names)
    return [Member(m, min(m.delay, sim.config.round_s), s, s * ratios[n][whole], m.work - m.done, batch=b,
                   ratios=ratios[n]) for m, n, (s, b) in zip(members, names, solo)]


__all__ = ["group_members", "subgroup_ratios"]
