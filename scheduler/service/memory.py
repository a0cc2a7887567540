"""GPU memory in ``colocate serve``: what a job is planned to need, the hard limit each member of a group gets,
and what an out-of-memory failure teaches.

**Footprint** (GB per GPU, without its CUDA context) of a job at a local batch on a GPU type, first that applies:

1. ``memory_gb`` declared in its job file;
2. a model of the zoo: its peak measured alone on that GPU type, else on another one
   (``scheduler/data/solo-<gpu>.csv``, at 224 px: linear in the batch between and beyond the measured batches, at
   another input size the batch of as many pixels), else the model estimate the profiler plans campaigns with
   (parameters, gradients and momentum in fp32 plus activations per sample, :mod:`profiler.campaign.estimate`)
   scaled by how far it falls short of the measured peaks (1.77×: workspaces, the allocator's rounding);
3. a command that declared nothing: unknown (planned at 0; :func:`scheduler.model.memory.member_limits` gives it
   an equal share of what its partners leave).

Then the job's own **learned floor**: a job that ran out of memory (``oom``) reached at least what it had when
it failed; its estimate becomes ``max(reached, planned) × OOM_GROWTH`` at that local batch, and at other
batches the planned footprint times the same factor over plan. Kept in the state (``meta.memory``), so the
ILP (:func:`planned_gb` → ``Job.memory_gb``, the one memory rule of :mod:`scheduler.model.memory`) does not plan
the pairing that failed again unless the raised estimate fits.

**Limits** (:func:`group_limits`): each member of a group gets ``(1 + h) · footprint + context`` of each of its
GPUs, scaled down so the group never overcommits the GPU; a job alone gets none. The limit reaches the job as
``COLOCATE_MEMORY_LIMIT_BYTES`` (every job; the built-in trainer caps its caching allocator with it), and under
MPS as the client limit ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` its supervisor sets beside the group's private
daemon (:mod:`scheduler.executor.supervise`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from scheduler.model.memory import CONTEXT_GB, GIB, member_limits
from scheduler.service.jobspec import JobSpec

META_KEY = "memory"  # meta: job -> what its out-of-memory failures taught (see learned_floor)
OOM_GROWTH = 1.25  # each out-of-memory failure raises the job's estimate at least this much
MEASURED_IMAGE_SIZE = 224  # the bundled solos' input size


def model_footprint_gb(model: str, local_batch: float, image_size: int, gpu_type: str) -> float:
    """A zoo model's footprint alone: its peak measured on ``gpu_type`` when bundled, else on another bundled GPU
    type (a model's memory at a batch barely depends on the GPU); at another input size, the measured curve at the
    batch of as many pixels. A model never measured: the profiler's estimate, scaled by how far the estimate falls
    short of the measured peaks (:func:`_calibration`: cuDNN workspaces and the caching allocator's rounding)."""
    points = _measured_points(model, gpu_type)
    if len(points) >= 2:
        pixels = (image_size / MEASURED_IMAGE_SIZE) ** 2
        return _interpolate(points, local_batch * pixels) / 1024.0
    return _estimate_mib(model, local_batch, image_size) * _calibration() / 1024.0


def _measured_points(model: str, gpu_type: str) -> list[tuple[int, float]]:
    """(batch, peak MiB) of ``model`` at 224 px on ``gpu_type``, else on the first bundled type that has it."""
    from scheduler.formats.bundled_files import MEASURED_GPU_TYPES
    from scheduler.formats.solo_times import solo_table

    for gpu in (gpu_type, *MEASURED_GPU_TYPES):
        points = sorted((run.batch_size, run.peak_memory_mib) for (m, _), run in solo_table(gpu).items()
                        if m == model and run.image_size == MEASURED_IMAGE_SIZE)
        if len(points) >= 2:
            return points
    return []


@lru_cache(maxsize=1)
def _calibration() -> float:
    """Median of measured peak over the profiler's estimate across the bundled solos (1.77 on the H100: the
    estimate counts parameters, gradients, momentum and saved activations, not workspaces or the allocator's
    rounding); 2 when nothing is bundled."""
    from scheduler.formats.bundled_files import MEASURED_GPU_TYPES
    from scheduler.formats.solo_times import solo_table

    ratios = sorted(run.peak_memory_mib / _estimate_mib(run.model, run.batch_size, run.image_size)
                    for gpu in MEASURED_GPU_TYPES for run in solo_table(gpu).values())
    return ratios[len(ratios) // 2] if ratios else 2.0


def _interpolate(points: Sequence[tuple[int, float]], batch: float) -> float:
    """Piecewise linear in the batch through the measured points, extended by the nearest segment."""
    lower = [p for p in points if p[0] <= batch]
    upper = [p for p in points if p[0] > batch]
    (b0, m0), (b1, m1) = (lower[-1], upper[0]) if lower and upper else (points[0], points[1]) if not lower \
        else (points[-2], points[-1])
    return max(m0 + (m1 - m0) * (batch - b0) / (b1 - b0), 1.0)


def _estimate_mib(model: str, local_batch: float, image_size: int) -> float:
    from profiler.campaign.estimate import ACTIVATION_MIB_224, PARAMS_M

    weights = PARAMS_M.get(model, 50.0) * 1e6 * 4 * 3 / 2**20  # parameters, gradients, momentum (fp32)
    return weights + ACTIVATION_MIB_224.get(model, 100.0) * (image_size / 224) ** 2 * local_batch


def base_footprint_gb(spec: JobSpec, gpu_type: str, local_batch: float) -> float | None:
    """Its footprint before anything was learned: declared, measured or estimated; None for an undeclared command."""
    if spec.memory_gb is not None:
        return spec.memory_gb
    if spec.model is not None:
        return model_footprint_gb(spec.model, local_batch, spec.image_size, gpu_type)
    return None


def footprint_gb(spec: JobSpec, gpu_type: str, local_batch: float, learned: Mapping[str, Any] | None) -> float | None:
    """Its footprint with what its out-of-memory failures taught (``learned``: its ``meta.memory`` record)."""
    base = base_footprint_gb(spec, gpu_type, local_batch)
    if not learned or not learned.get("floor_gb"):
        return base
    floor = float(learned["floor_gb"])
    if base is None:
        return floor
    at = base_footprint_gb(spec, str(learned.get("gpu_type") or gpu_type), float(learned["batch"])) or base
    return base * max(1.0, floor / at)


def planned_gb(spec: JobSpec, gpu_types: Sequence[str], batch_size: int, learned: Mapping[str, Any] | None
               ) -> float | None:
    """What the round ILP plans the job with (``Job.memory_gb``, one number per job): its footprint at its global
    batch on its fewest GPUs, on the allowed GPU type where it is largest."""
    local = max(batch_size // max(spec.min_gpus, 1), 1)
    sizes = [f for t in (spec.gpu_types or gpu_types) if (f := footprint_gb(spec, t, local, learned)) is not None]
    return max(sizes) if sizes else None


def group_limits(gpu_memory_gb: float, members: Sequence[tuple[JobSpec, int, Mapping[str, Any] | None]],
                 gpu_type: str, num_gpus: int, context_gb: float = CONTEXT_GB) -> list[int | None]:
    """Each member's hard limit in bytes per GPU for a group of ``(spec, global batch, learned)`` on ``num_gpus``
    GPUs of ``gpu_type`` (None for a job alone); they sum within the GPU (:func:`member_limits`)."""
    footprints = [footprint_gb(spec, gpu_type, max(batch // max(num_gpus, 1), 1), learned)
                  for spec, batch, learned in members]
    return [None if limit is None else int(limit * GIB)
            for limit in member_limits(gpu_memory_gb, footprints, context_gb)]


def raised_record(previous: Mapping[str, Any] | None, *, planned_gb: float | None, reached_gb: float | None,
                  limit_gb: float | None, local_batch: int, gpu_type: str, when: float) -> dict[str, Any]:
    """A job's ``meta.memory`` record after an out-of-memory failure: its floor raised from what it reached (at
    least its limit's allocations when it did not say) and at least ``OOM_GROWTH`` over its previous estimate."""
    known = [x for x in (reached_gb, planned_gb) if x is not None]
    if reached_gb is None and limit_gb is not None:
        known.append(max(limit_gb - CONTEXT_GB, limit_gb / 2))
    floor = max(known) * OOM_GROWTH if known else None
    if previous and previous.get("floor_gb"):
        floor = max(floor or 0.0, float(previous["floor_gb"]) * OOM_GROWTH)
    return {"floor_gb": round(floor, 6) if floor else None, "batch": local_batch, "gpu_type": gpu_type,
            "ooms": int((previous or {}).get("ooms", 0)) + 1, "limit_gb": limit_gb, "reached_gb": reached_gb,
            "at": when}


__all__ = ["META_KEY", "OOM_GROWTH", "base_footprint_gb", "footprint_gb", "group_limits", "model_footprint_gb",
           "planned_gb", "raised_record"]
