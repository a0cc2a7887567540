"""What ``colocate jobs`` and ``colocate learned`` show: plain dicts built from the state database."""

from __future__ import annotations

from typing import Any

from scheduler.learning.measured import SoloTimes, learned_ratios
from scheduler.service.state import StateStore


def job_views(state: StateStore) -> list[dict[str, Any]]:
    """One dict per job: state, GPU type and count, batch, partner, progress, measured throughput, restarts, and
    for a queued job why it waits (the last round's reason, :mod:`.waiting`)."""
    from scheduler.service.waiting import META_KEY, loads

    reasons = loads(state.meta(META_KEY))
    out = []
    for row in state.jobs():
        out.append({
            "name": row.name, "state": row.state, "gpu_type": row.gpu_type if row.state == "running" else None,
            "num_gpus": row.num_gpus if row.state == "running" else 0, "batch_size": row.batch_size,
            "partner": row.partner if row.state == "running" else None, "step": row.step, "samples": row.samples,
            "target": row.target, "target_unit": "steps" if row.spec.steps else "samples",
            "progress": round(row.done / row.target, 4) if row.target else None,
            "samples_per_s": round(row.samples_per_s, 2) if row.samples_per_s else None,
            "restarts": row.restarts, "crashes": row.crashes, "adaptive": row.spec.adaptive,
            "application": row.spec.app, "error": row.error or row.invalid, "submitted_at": row.submitted_at,
            "finished_at": row.finished_at,
            "waiting": reasons.get(row.name) if row.state == "queued" else None})
    return out


def learned_view(state: StateStore) -> dict[str, Any]:
    """The learned tables: solo iteration times per configuration and pair ratios, with sample counts."""
    measurements = state.measurements()
    solo = [{**m, "samples_per_s": round(m["batch_size"] / m["iter_time_s"], 3)}
            for m in measurements if not m["partner_type"]]
    return {"throughput": solo, "colocation": learned_ratios(measurements, SoloTimes(measurements))}
