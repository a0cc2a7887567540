"""A shared GPU is a contract between its members (``colocate serve``): the memory each may use, the slowdown each
accepted, and what the server does when one breaks it.

* **Memory.** Every active job is planned with a footprint (:func:`planned_memory` → ``Job.requirements.memory_gb``,
  the one memory rule of :mod:`scheduler.model.memory`); a group that starts gives each member its hard limit
  (:func:`unit_limits`). A member that runs out of memory under its limit fails alone (:func:`record_oom`): an
  ``oom`` event with the limit in force, its estimate raised from what it reached (``meta.memory``), back to the
  queue without counting as a crash — so the pairing is not planned again unless the raised estimate fits —
  while its partner runs on untouched. Out of memory *alone* (no limit) is a crash like any other, recorded too.
* **Slowdown.** Each member accepts a slowdown: its own ``max_slowdown``, else the cluster-wide one (the policy's
  ``IlpConfig.max_slowdown``), none with ``exclusive`` (never grouped). The round ILP plans no group (pair or
  three) that breaks a bound under its belief or under what was measured from its first sample, the lower winning
  (:class:`scheduler.model.colocation.BoundedTable` over :func:`measured_table`); a running group whose
  *measured* ratio breaks a member's bound (:func:`broken_bounds`) is released from its minimum run and split at the
  next round — a restart of each member, with the reason in its ``split`` event — and the measurement stays in
  ``measurements``, so the group is not planned again. A ratio's yardstick is the member's solo time measured alone,
  else its estimate (:class:`Yardstick`: profile, else prior; the basis is said), so a bound holds from a group's
  first measurement.
* **Seen.** ``colocate jobs`` and the Prometheus metrics show each running job's measured slowdown and its basis
  (:func:`measured_slowdown` against :func:`solo_estimates`, kept in the state each round), its memory limit and its
  out-of-memory failures.

Memory in detail — gPU memory in ``colocate serve``: what a job is planned to need, the hard limit each member of a group gets,
and what an out-of-memory failure teaches.

**Footprint** (GB per GPU, without its CUDA context) of a job at a local batch on a GPU type, first that applies:

1. ``memory_gb`` declared in its job file;
2. a model of the zoo: its peak measured alone on that GPU type, else on another one
   (``scheduler/data/solo-<gpu>.csv``, at 224 px: linear in the batch between and beyond the measured batches, at
   another input size the batch of as many activations — the zoo builds its CIFAR-style variant below 96 px —, and
   never below the weights, gradients, momentum and activations its step holds), else the model estimate the
   profiler plans campaigns with
   (parameters, gradients and momentum in fp32 plus activations per sample, :mod:`profiler.campaign.estimate`)
   scaled by how far it falls short of the measured peaks (1.77×: workspaces, the allocator's rounding);
3. a command that declared nothing: unknown (planned at 0; :func:`scheduler.model.memory.member_limits` gives it
   an equal share of what its partners leave).

Then the job's own **learned floor**: a job that ran out of memory (``oom``) reached at least what it had when
it failed; its estimate becomes ``max(reached, planned) × OOM_GROWTH`` at that local batch, and at other
batches the planned footprint times the same factor over plan. Kept in the state (``meta.memory``), so the
ILP (:func:`planned_gb` → ``Job.requirements.memory_gb``, the one memory rule of :mod:`scheduler.model.memory`)
does not plan the pairing that failed again unless the raised estimate fits.

**Limits** (:func:`group_limits`): each member of a group gets ``(1 + h) · footprint + context`` of each of its
GPUs, scaled down so the group never overcommits the GPU; a job alone gets none. The limit reaches the job as
``COLOCATE_MEMORY_LIMIT_BYTES`` (every job; the built-in trainer caps its caching allocator with it), and under
MPS as the client limit ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` its supervisor sets beside the group's private
daemon (:mod:`scheduler.executor.supervise`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from common.untrusted import printable
from scheduler.learning.measured import SoloTimes, job_type
from scheduler.model.colocation import ColocationTable, MeasuredKey, MeasuredTable
from scheduler.model.jobs import slowdown_bound
from scheduler.model.memory import CONTEXT_GB, GIB, member_limits
from scheduler.service.jobs.jobspec import JobSpec
from scheduler.service.state.store import JobRow

MIN_SPLIT_SAMPLES = 2  # co-located samples (each a mean over >= 2 steps between polls) before a bound is judged
OOM_MARKERS = ("out of memory", "cudaerrormemoryallocation", "alloc_failed", "can't allocate memory")


# -- memory --------------------------------------------------------------------------------------------------
META_KEY = "memory"  # meta: job -> what its out-of-memory failures taught (see learned_floor)
OOM_GROWTH = 1.25  # each out-of-memory failure raises the job's estimate at least this much
MEASURED_IMAGE_SIZE = 224  # the bundled solos' input size


def model_footprint_gb(model: str, local_batch: float, image_size: int, gpu_type: str) -> float:
    """A zoo model's footprint alone: its peak measured on ``gpu_type`` when bundled, else on another bundled GPU
    type (a model's memory at a batch barely depends on the GPU); at another input size, the measured curve at the
    batch of as many pixels. A model never measured: the profiler's estimate, scaled by how far the estimate falls
    short of the measured peaks (:func:`_calibration`: cuDNN workspaces and the caching allocator's rounding)."""
    from profiler.campaign.estimate import activation_mib

    points = _measured_points(model, gpu_type)
    if len(points) >= 2:  # the batch whose activations at 224 px weigh what this batch's do at image_size
        equivalent = local_batch * activation_mib(model, image_size) / activation_mib(model, MEASURED_IMAGE_SIZE)
        # never below what its step provably holds (weights, gradients, momentum, saved activations): the
        # measured curve's intercept, extended below its smallest batch, can fall under the weights alone
        return max(_interpolate(points, equivalent), _estimate_mib(model, local_batch, image_size)) / 1024.0
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
    from profiler.campaign.estimate import PARAMS_M, activation_mib

    weights = PARAMS_M.get(model, 50.0) * 1e6 * 4 * 3 / 2**20  # parameters, gradients, momentum (fp32)
    return weights + activation_mib(model, image_size) * local_batch


def base_footprint_gb(spec: JobSpec, gpu_type: str, local_batch: float) -> float | None:
    """Its footprint before anything was learned: declared, measured or estimated; None for an undeclared command."""
    if spec.requirements.memory_gb is not None:
        return spec.requirements.memory_gb
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
    """What the round ILP plans the job with (``Job.requirements.memory_gb``, one number per job): its footprint at
    its global batch on its fewest GPUs, on the allowed GPU type where it is largest."""
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


def memory_records(state: Any) -> dict[str, dict[str, Any]]:
    """What out-of-memory failures taught, per job (``meta.memory``; checked by :mod:`.rows`)."""
    value = state.meta_value(META_KEY)
    return dict(value) if isinstance(value, dict) else {}


def oom_totals(records: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Out-of-memory failures per GPU type over every job's record."""
    out: dict[str, int] = {}
    for record in records.values():
        gpu = str(record.get("gpu_type", "unknown"))
        out[gpu] = out.get(gpu, 0) + int(record.get("ooms", 0))
    return out


def planned_memory(rows: Iterable[JobRow], gpu_types: Sequence[str], records: Mapping[str, Any]
                   ) -> dict[str, float | None]:
    """Each active job's planned GPU memory per GPU (:func:`scheduler.service.contract.planned_gb`)."""
    return {r.name: planned_gb(r.spec, gpu_types, r.batch_size or r.spec.batch_size, records.get(r.name))
            for r in rows}


def unit_limits(unit: Sequence[Any], rows: Mapping[str, JobRow], gpu_memory_gb: float, records: Mapping[str, Any],
                context_gb: float) -> dict[str, int | None]:
    """Each member's memory limit in bytes per GPU for a unit of :class:`scheduler.service.rounds.Slot` (None alone)."""
    first = unit[0]
    limits = group_limits(gpu_memory_gb, [(rows[s.job].spec, s.batch_size, records.get(s.job)) for s in unit],
                          first.gpu_type, first.num_gpus, context_gb)
    return {s.job: limit for s, limit in zip(unit, limits)}


def is_oom(exit: Mapping[str, Any], oom: Mapping[str, Any] | None) -> bool:
    """Whether a job's end was an out-of-memory failure: its record (``oom.json``), or its last log line."""
    if exit.get("stop_requested") or exit.get("returncode") in (0, None):
        return False
    return oom is not None or any(m in str(exit.get("last_line", "")).lower() for m in OOM_MARKERS)


def record_oom(db: Any, row: JobRow, oom: Mapping[str, Any] | None, limit_bytes: int | None,
               records: dict[str, dict[str, Any]]) -> str:
    """Record an out-of-memory failure of ``row`` (one transaction ``db``): the ``oom`` event with the limit in
    force and what it reached, the job's raised estimate in ``meta.memory``; returns the event's text."""
    gb = 1024 ** 3
    local = max((row.batch_size or row.spec.batch_size) // max(row.num_gpus, 1), 1)
    if oom is not None and oom.get("local_batch"):
        local = int(oom["local_batch"])
    reached = oom.get("reached_bytes") if oom else None
    limit_gb = limit_bytes / gb if limit_bytes else None
    planned = footprint_gb(row.spec, row.gpu_type or "", local, records.get(row.name))
    record = raised_record(records.get(row.name), planned_gb=planned, reached_gb=reached / gb if reached else None,
                           limit_gb=limit_gb, local_batch=local, gpu_type=row.gpu_type or "unknown", when=time.time())
    records[row.name] = record
    db.set_meta(META_KEY, json.dumps(records, sort_keys=True))
    estimate = f"; estimate now {record['floor_gb']:.2f} GiB at local batch {local}" if record["floor_gb"] else ""
    text = (f"{oom_text(reached / gb if reached else None, limit_gb, row.partner)} at batch {row.batch_size} on "
            f"{row.gpu_type}{estimate}")
    db.event(row.name, "oom", printable(text, 900))
    return text


def oom_text(reached_gb: float | None, limit_gb: float | None, partner: str | None) -> str:
    """What an out-of-memory failure reached against the limit in force, both on the limit's basis (its CUDA
    context included: ``reached_bytes`` is what the job allocated, the context not counted), e.g. ``needed 0.69 GiB
    (0.19 GiB allocated + a 0.50 GiB context), over its 0.52 GiB limit beside b``. A job alone has no limit; one whose
    partners ended runs on under the limit it started with, and is said to."""
    if limit_gb is None:
        reached = f"allocated {reached_gb:.2f} GiB and " if reached_gb else ""
        return f"{reached}ran out with no limit (alone on its GPUs)"
    where = f" beside {partner}" if partner else " (set beside partners that have ended)"
    if not reached_gb:
        return f"ran out under its {limit_gb:.2f} GiB limit{where}"
    needed = reached_gb + CONTEXT_GB
    past = "over" if needed > limit_gb else "within"
    return (f"needed {needed:.2f} GiB ({reached_gb:.2f} GiB allocated + a {CONTEXT_GB:.2f} GiB context), {past} its "
            f"{limit_gb:.2f} GiB limit{where}")


# -- slowdown ------------------------------------------------------------------------------------------------
# (application, GPU type, GPU count, global batch) -> (solo seconds per step, basis): the round's learned model
SoloEstimate = Callable[[str, str, int, int], "tuple[float, str] | None"]
SOLO_KEY = "solo_estimates"  # meta: running member of a group -> [solo seconds, basis] its slowdown is judged by
BASES = ("measured", "profile", "prior")
BASIS_TEXT = {"measured": "measured alone", "profile": "estimated from its profile (not yet measured alone)",
              "prior": "estimated from the prior (not yet measured alone)"}


class Yardstick:
    """A member's solo time per step, the yardstick of its slowdown: measured alone at the same GPU type, count and
    batch when it was, else the round's estimate (``estimate``: the profile's, else the prior's), so a bound holds
    from the first measurement of a group, not from the first solo run of its members."""

    def __init__(self, measurements: Sequence[Mapping[str, Any]], estimate: SoloEstimate | None = None) -> None:
        self.solo = SoloTimes(measurements)
        self.estimate = estimate

    def time(self, application: str, gpu_type: str, num_gpus: int, batch_size: int) -> tuple[float, str] | None:
        hit = self.solo.measured(application, gpu_type, num_gpus, batch_size)
        if hit is not None and hit[0] > 0:
            return hit[0], "measured"
        guess = self.estimate(application, gpu_type, num_gpus, batch_size) if self.estimate is not None else None
        return guess if guess is not None and guess[0] > 0 else None


def measured_table(table: ColocationTable | None, measurements: Sequence[Mapping[str, Any]],
                   estimate: SoloEstimate | None = None) -> ColocationTable | None:
    """``table`` with the ratios the server measured beside it (:class:`MeasuredTable`): for each job type measured
    beside others (a pair or a group of three; from its first sample), its ratio ``t/t'`` against its solo time
    (:class:`Yardstick`: measured, else estimated). The ILP's bound check then holds a group to what it was measured
    at, whatever the belief (shrunk toward its prior, explored upward) says; the ratios it plans with are the
    belief's. A group running together now is judged on :data:`MIN_SPLIT_SAMPLES`, as :func:`broken_bounds` splits
    it (with a ``split`` event saying why), not dropped silently on one sample."""
    yardstick = Yardstick(measurements, estimate)
    seen: dict[MeasuredKey, float] = {}
    weight: dict[MeasuredKey, int] = {}
    for m in measurements:
        partner, n = m["partner_type"], int(m["count"])
        if not partner or n < 1 or not float(m["iter_time_s"]) > 0:
            continue
        alone = yardstick.time(m["application"], m["gpu_type"], int(m["num_gpus"]), int(m["batch_size"]))
        key = (m["gpu_type"], job_type(m["application"], int(m["batch_size"])), partner)
        if alone is not None and n > weight.get(key, 0):  # over GPU counts: the best-measured row
            weight[key], seen[key] = n, alone[0] / float(m["iter_time_s"])
    if table is None or not seen:
        return table
    return MeasuredTable(table.ratios, inner=table, measured=seen, samples=weight, running_samples=MIN_SPLIT_SAMPLES)


@dataclass(frozen=True)
class BrokenBound:
    """A member of a running group measured slower than its bound."""

    group: str
    job: str
    ratio: float
    bound: float
    others: tuple[str, ...]
    basis: str = "measured"  # its solo time: measured alone, or estimated (Yardstick)

    def text(self) -> str:
        return (f"split: measured at {self.ratio:.2f} of its solo speed (slowdown {1 / self.ratio:.2f}) beside "
                f"{', '.join(self.others)} breaks its bound {self.bound:g}; solo time {BASIS_TEXT[self.basis]}")


def member_ratio(coloc: Mapping[tuple[Any, ...], Mapping[str, Any]], yardstick: Yardstick, row: JobRow,
                 others: Sequence[JobRow]) -> tuple[float, int, str] | None:
    """A running member's measured ratio ``t / t'`` against its group (pairs and groups of three alike), the
    co-located samples behind it and the basis of its solo time; None until it was measured in the group (or no
    solo time is known at all). ``coloc``: co-located measurements by (application, GPU type, GPU count, batch,
    partner type)."""
    partner_type = "+".join(sorted(job_type(o.spec.app, o.batch_size or 0) for o in others))
    hit = coloc.get((row.spec.app, row.gpu_type, row.num_gpus, row.batch_size or 0, partner_type))
    alone = yardstick.time(row.spec.app, row.gpu_type or "", row.num_gpus, row.batch_size or 0)
    if hit is None or alone is None or not float(hit["iter_time_s"]) > 0:
        return None
    return alone[0] / float(hit["iter_time_s"]), int(hit["count"]), alone[1]


def broken_bounds(groups: Mapping[str, list[JobRow]], measurements: Sequence[Mapping[str, Any]],
                  default_bound: float | None, estimate: SoloEstimate | None = None) -> dict[str, list[BrokenBound]]:
    """Running groups (key -> members) with a member measured slower than its bound (its own, else
    ``default_bound``) over at least :data:`MIN_SPLIT_SAMPLES` co-located samples, against its solo time measured,
    else estimated (``estimate``: :class:`Yardstick`)."""
    yardstick = Yardstick(measurements, estimate)
    coloc = {(m["application"], m["gpu_type"], int(m["num_gpus"]), int(m["batch_size"]), m["partner_type"]): m
             for m in measurements if m["partner_type"]}
    out: dict[str, list[BrokenBound]] = {}
    for key, members in groups.items():
        if len(members) < 2:
            continue
        for row in members:
            bound = slowdown_bound(row.spec.requirements.max_slowdown, default_bound)
            if bound is None:
                continue
            others = [o for o in members if o.name != row.name]
            seen = member_ratio(coloc, yardstick, row, others)
            if seen is not None and seen[1] >= MIN_SPLIT_SAMPLES and seen[0] * bound < 1.0 - 1e-9:
                out.setdefault(key, []).append(
                    BrokenBound(key, row.name, seen[0], bound, tuple(o.name for o in others), seen[2]))
    return out


def solo_estimates(rows: Iterable[JobRow], measurements: Sequence[Mapping[str, Any]], estimate: SoloEstimate
                   ) -> dict[str, list[Any]]:
    """The solo time each running member of a group is judged by while it has none measured: ``[seconds, basis]``
    (kept in ``meta`` as :data:`SOLO_KEY` each round, so ``jobs`` and the metrics show the slowdown the server
    judges, with its basis, without the goodput model)."""
    yardstick = Yardstick(measurements, estimate)
    out: dict[str, list[Any]] = {}
    for r in rows:
        if r.state == "running" and r.others and r.batch_size:
            alone = yardstick.time(r.spec.app, r.gpu_type or "", r.num_gpus, r.batch_size)
            if alone is not None and alone[1] != "measured":
                out[r.name] = [round(alone[0], 9), alone[1]]
    return out


def load_solo_estimates(state: Any) -> dict[str, tuple[float, str]]:
    """:data:`SOLO_KEY` as the last round stored it (checked by :mod:`.state.rows`; set aside when damaged)."""
    value = state.meta_value(SOLO_KEY)
    return {str(k): (float(v[0]), str(v[1])) for k, v in value.items()} if isinstance(value, dict) else {}


def measured_slowdown(row: JobRow, solo: SoloTimes, estimates: Mapping[str, tuple[float, str]] | None = None
                      ) -> tuple[float, str] | None:
    """A running member's slowdown and its basis: its last measured time per step in its group over its solo time on
    the same GPU type, count and batch — measured alone (``measured``), else the estimate the server judges it by
    (``estimates``: :func:`load_solo_estimates`; ``profile`` or ``prior``); None alone, queued, or until it was
    measured in its group."""
    if row.state != "running" or not row.others or not row.samples_per_s or not row.batch_size:
        return None
    alone = solo.measured(row.spec.app, row.gpu_type or "", row.num_gpus, row.batch_size)
    known = (alone[0], "measured") if alone is not None and alone[0] > 0 else (estimates or {}).get(row.name)
    if known is None:
        return None
    return (row.batch_size / row.samples_per_s) / known[0], known[1]


__all__ = ["BASES", "BrokenBound", "MIN_SPLIT_SAMPLES", "SOLO_KEY", "SoloEstimate", "Yardstick", "broken_bounds",
           "is_oom", "load_solo_estimates", "oom_totals", "measured_slowdown", "measured_table",
           "member_ratio", "memory_records", "oom_text", "planned_memory", "record_oom", "solo_estimates",
           "unit_limits"]
