"""A shared GPU is a contract between its members (``colocate serve``): the memory each may use, the slowdown each
accepted, and what the server does when one breaks it.

* **Memory.** Every active job is planned with a footprint (:func:`planned_memory` → ``Job.memory_gb``, the one
  memory rule of :mod:`scheduler.model.memory`); a group that starts gives each member its hard limit
  (:func:`unit_limits`). A member that runs out of memory under its limit fails alone (:func:`record_oom`): an
  ``oom`` event with the limit in force, its estimate raised from what it reached (``meta.memory``), back to the
  queue without counting as a crash — so the pairing is not planned again unless the raised estimate fits —
  while its partner runs on untouched. Out of memory *alone* (no limit) is a crash like any other, recorded too.
* **Slowdown.** Each member accepts a slowdown: its own ``max_slowdown``, else the cluster-wide one (the policy's
  ``IlpConfig.max_slowdown``), none with ``exclusive`` (never grouped). The round ILP plans no group that breaks
  a bound under its belief or under what was measured (:class:`scheduler.model.colocation.BoundedTable` over
  :func:`measured_table`); a running group whose *measured* ratio breaks a member's bound
  (:func:`broken_bounds`) is released from its minimum run and split at the next round — a restart of each
  member, with the reason in its ``split`` event — and the measurement stays in ``measurements``, so the pair is
  not planned again.
* **Seen.** ``colocate jobs`` and the Prometheus metrics show each running job's measured slowdown
  (:func:`measured_slowdown`), its memory limit and its out-of-memory failures.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.untrusted import printable
from scheduler.learning.measured import SoloTimes, job_type
from scheduler.model.colocation import ColocationTable, MeasuredKey, MeasuredTable
from scheduler.service.memory import META_KEY, footprint_gb, group_limits, planned_gb, raised_record
from scheduler.service.store import JobRow

MIN_SPLIT_SAMPLES = 2  # co-located samples (each a mean over >= 2 steps between polls) before a bound is judged
OOM_MARKERS = ("out of memory", "cudaerrormemoryallocation", "alloc_failed", "can't allocate memory")


# -- memory --------------------------------------------------------------------------------------------------
def limit_of(value: Any) -> int | None:
    """A member's memory limit in bytes as its group document (a stored row: untrusted) gives it; None if not one."""
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 10**15 else None


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
    """Each active job's planned GPU memory per GPU (:func:`scheduler.service.memory.planned_gb`)."""
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
    where = f" beside {row.partner}" if row.partner else " alone"
    reached_text = f"reached {reached / gb:.2f} GiB" if reached else "ran out"
    limit_text = f"of its {limit_gb:.2f} GiB limit" if limit_gb else "with no limit (alone on its GPUs)"
    estimate = f"; estimate now {record['floor_gb']:.2f} GiB at local batch {local}" if record["floor_gb"] else ""
    text = f"{reached_text} {limit_text} at batch {row.batch_size}{where} on {row.gpu_type}{estimate}"
    db.event(row.name, "oom", printable(text, 900))
    return text


# -- slowdown ------------------------------------------------------------------------------------------------
def measured_table(table: ColocationTable | None, measurements: Sequence[Mapping[str, Any]]) -> ColocationTable | None:
    """``table`` with the ratios the server measured beside it (:class:`MeasuredTable`): for each job type measured
    beside another (over :data:`MIN_SPLIT_SAMPLES` samples) against its own measured solo time, its ratio ``t/t'``
    — the partner's side too when measured, else 1 (no constraint). The ILP's bound check then holds a pair to what
    it was measured at, whatever the belief (shrunk toward its prior) says; the ratios it plans with are the belief's."""
    solo = SoloTimes(measurements)
    seen: dict[MeasuredKey, float] = {}
    weight: dict[MeasuredKey, int] = {}
    for m in measurements:
        partner, n = m["partner_type"], int(m["count"])
        if not partner or "+" in partner or n < MIN_SPLIT_SAMPLES or not float(m["iter_time_s"]) > 0:
            continue  # alone, a group of three (the table's rows are pairs), or too few samples
        alone = solo.measured(m["application"], m["gpu_type"], int(m["num_gpus"]), int(m["batch_size"]))
        key = (m["gpu_type"], job_type(m["application"], int(m["batch_size"])), partner)
        if alone is not None and n > weight.get(key, 0):  # over GPU counts: the best-measured row
            weight[key], seen[key] = n, alone[0] / float(m["iter_time_s"])
    if table is None or not seen:
        return table
    measured = {(g, a, b): (r, seen.get((g, b, a), 1.0)) for (g, a, b), r in seen.items()}
    measured.update({(g, b, a): (seen.get((g, b, a), 1.0), r) for (g, a, b), r in seen.items()})
    return MeasuredTable(table.ratios, inner=table, measured=measured)


@dataclass(frozen=True)
class BrokenBound:
    """A member of a running group measured slower than its bound."""

    group: str
    job: str
    ratio: float
    bound: float
    others: tuple[str, ...]

    def text(self) -> str:
        return (f"split: measured at {self.ratio:.2f} of its solo speed (slowdown {1 / self.ratio:.2f}) beside "
                f"{', '.join(self.others)} breaks its bound {self.bound:g}")


def member_ratio(coloc: Mapping[tuple[Any, ...], Mapping[str, Any]], solo: SoloTimes, row: JobRow,
                 others: Sequence[JobRow]) -> tuple[float, int] | None:
    """A running member's measured ratio ``t / t'`` against its group (pairs and groups of three alike) and the
    co-located samples behind it; None until both times are measured. ``coloc``: co-located measurements by
    (application, GPU type, GPU count, batch, partner type)."""
    partner_type = "+".join(sorted(job_type(o.spec.app, o.batch_size or 0) for o in others))
    hit = coloc.get((row.spec.app, row.gpu_type, row.num_gpus, row.batch_size or 0, partner_type))
    alone = solo.measured(row.spec.app, row.gpu_type or "", row.num_gpus, row.batch_size or 0)
    if hit is None or alone is None or not float(hit["iter_time_s"]) > 0:
        return None
    return alone[0] / float(hit["iter_time_s"]), int(hit["count"])


def broken_bounds(groups: Mapping[str, list[JobRow]], measurements: Sequence[Mapping[str, Any]],
                  default_bound: float | None) -> dict[str, list[BrokenBound]]:
    """Running groups (key -> members) with a member measured slower than its bound (its own, else
    ``default_bound``) over at least :data:`MIN_SPLIT_SAMPLES` co-located samples."""
    solo = SoloTimes(measurements)
    coloc = {(m["application"], m["gpu_type"], int(m["num_gpus"]), int(m["batch_size"]), m["partner_type"]): m
             for m in measurements if m["partner_type"]}
    out: dict[str, list[BrokenBound]] = {}
    for key, members in groups.items():
        if len(members) < 2:
            continue
        for row in members:
            bound = row.spec.max_slowdown if row.spec.max_slowdown is not None else default_bound
            if bound is None:
                continue
            others = [o for o in members if o.name != row.name]
            seen = member_ratio(coloc, solo, row, others)
            if seen is not None and seen[1] >= MIN_SPLIT_SAMPLES and seen[0] * bound < 1.0 - 1e-9:
                out.setdefault(key, []).append(BrokenBound(key, row.name, seen[0], bound, tuple(o.name for o in others)))
    return out


def measured_slowdown(row: JobRow, solo: SoloTimes) -> float | None:
    """A running member's slowdown: its last measured time per step in its group over the solo time measured for its
    type on the same GPU type, count and batch; None alone, queued, or until both are measured (never a guess)."""
    if row.state != "running" or not row.others or not row.samples_per_s or not row.batch_size:
        return None
    alone = solo.measured(row.spec.app, row.gpu_type or "", row.num_gpus, row.batch_size)
    if alone is None or not alone[0] > 0:
        return None
    return (row.batch_size / row.samples_per_s) / alone[0]


__all__ = ["BrokenBound", "MIN_SPLIT_SAMPLES", "broken_bounds", "is_oom", "limit_of", "oom_totals", "measured_slowdown",
           "measured_table", "member_ratio", "memory_records", "planned_memory", "record_oom", "unit_limits"]
