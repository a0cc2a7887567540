"""The one memory rule of a shared GPU: when a group fits, and the hard limit each member gets.

A group of ``n`` jobs on one GPU (per GPU of a data-parallel group: each hosts one replica of each member)
fits when every member's planned footprint plus :data:`MEMORY_HEADROOM`, and one CUDA context per process,
stay within the GPU's memory::

    Σ_i (1 + h) · m_i  +  n · context  ≤  M

The ILP's group columns (:mod:`scheduler.ilp.columns`, :mod:`scheduler.ilp.pricing`, :mod:`scheduler.ilp.triples`)
and the simulator's memory model (:class:`scheduler.sim.job_model.MemoryModel`) both ask :func:`group_fits`, so a
group the simulator runs is one the ILP could have planned and the reverse. ``colocate serve`` then gives each
member of a group the hard limit :func:`member_limits` computes from the same numbers — its planned footprint plus
the headroom plus its context — so the limits of a group that fits sum within the GPU, and a member that
allocates past its own limit fails alone. A job alone on its GPUs is not limited.

Why 10 %: the footprints serve plans with are a job's measured peak (the caching allocator's reserved memory of
a solo run: ``scheduler/data/solo-h100.csv``), a declared ``memory_gb``, or a model estimate; the same job's
peak varies by a few per cent between runs and allocator states (the H100 grid's two sessions of the batch-64
solos: 2,644–2,700 MiB for ResNet-18, 10,324–10,918 MiB for VGG-19, i.e. up to 6 %), so 10 % covers that without
giving away a partner's memory. A member whose footprint is unknown (a command job that declared nothing and
never ran out of memory) is planned at 0 and gets an equal share of what the known members leave.
"""

from __future__ import annotations

from collections.abc import Sequence

MEMORY_HEADROOM = 0.10  # a member's limit: its planned footprint + 10 % (see the module docstring)
CONTEXT_GB = 0.5  # one CUDA context per process (IlpConfig.context_memory_gb is the ILP's copy of this default)
GIB = 1024 ** 3


def headroom_gb(footprint_gb: float) -> float:
    """The footprint with its headroom: what a member may use for its own allocations."""
    return footprint_gb * (1.0 + MEMORY_HEADROOM)


def group_fits(gpu_memory_gb: float, footprints_gb: Sequence[float | None], context_gb: float = CONTEXT_GB) -> bool:
    """Whether members of these footprints (GB per GPU; None: unknown, planned at 0) fit on one GPU together.
    One job alone always fits: the rule is about sharing."""
    if len(footprints_gb) <= 1:
        return True
    need = sum(headroom_gb(f) for f in footprints_gb if f is not None) + len(footprints_gb) * context_gb
    return need <= gpu_memory_gb + 1e-9


def free_for_footprints_gb(gpu_memory_gb: float, members: int, context_gb: float = CONTEXT_GB) -> float:
    """The largest total footprint ``members`` jobs may plan for together on one GPU (the inverse of the rule)."""
    return max(gpu_memory_gb - members * context_gb, 0.0) / (1.0 + MEMORY_HEADROOM)


def member_limits(gpu_memory_gb: float, footprints_gb: Sequence[float | None],
                  context_gb: float = CONTEXT_GB) -> tuple[float | None, ...]:
    """Each member's hard limit in GB (its allocations and its context): ``(1 + h)·m + context`` for a known
    footprint, an equal share of what the known members leave for an unknown one; None for a job alone.

    The limits never sum above the GPU: a group planned under another estimate (an adaptive job whose batch
    grew, an estimate raised since) has every limit scaled down until they do, so a member that outgrows its
    plan fails alone instead of taking memory its partner counted on."""
    if len(footprints_gb) <= 1:
        return (None,) * len(footprints_gb)
    known = [headroom_gb(f) + context_gb if f is not None else None for f in footprints_gb]
    total_known = sum(k for k in known if k is not None)
    unknown = sum(1 for k in known if k is None)
    if total_known > gpu_memory_gb and total_known > 0:
        scale = gpu_memory_gb * (1.0 if not unknown else 0.5) / total_known  # unknown members keep some too
        known = [k * scale if k is not None else None for k in known]
        total_known = sum(k for k in known if k is not None)
    share = max(gpu_memory_gb - total_known, 0.0) / unknown if unknown else 0.0
    return tuple(k if k is not None else share for k in known)


__all__ = ["CONTEXT_GB", "GIB", "MEMORY_HEADROOM", "free_for_footprints_gb", "group_fits", "headroom_gb",
           "member_limits"]
