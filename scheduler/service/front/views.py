"""What ``colocate jobs`` and ``colocate learned`` show: plain dicts built from the state database."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.learning import gradient_noise
from scheduler.learning.measured import SoloTimes, learned_ratios
from scheduler.service.state.rows import GroupRecord
from scheduler.service.state.store import StateStore


def job_views(state: StateStore) -> list[dict[str, Any]]:
    """One dict per job: state, GPU type and count, batch, partner, progress, measured throughput, restarts, for a
    queued job why it waits, for a running adaptive one why it is not scaled up (``note``; the last round's reasons,
    :mod:`.waiting`), and its share of a GPU (:mod:`.contract`): the slowdown measured in its group against its solo time
    measured alone, else estimated (``slowdown_basis``: ``measured``, ``profile`` or ``prior``; None when unknown:
    alone, queued, or not measured in its group yet), the memory limit it runs under, its own bound, its
    out-of-memory failures, and the gradient statistics it reported (:func:`job_gradients`)."""
    from scheduler.service.contract import load_solo_estimates, measured_slowdown, memory_records
    from scheduler.service.waiting import META_KEY, loads

    reasons = loads(state.meta(META_KEY))
    solo = SoloTimes(state.measurements())
    estimates = load_solo_estimates(state)
    groups = state.groups()  # read and checked once for both of its views
    limits = running_limits(state, groups)
    memory = memory_records(state)
    gradients = job_gradients(state)
    sharing = sharing_notes(state, groups)
    out = []
    for row in state.jobs():
        slowdown = measured_slowdown(row, solo, estimates)
        limit = limits.get(row.name) if row.state == "running" else None
        out.append({
            "name": row.name, "owner": row.owner, "owner_uid": row.owner_uid, "state": row.state,
            "gpu_type": row.gpu_type if row.state == "running" else None,
            "num_gpus": row.num_gpus if row.state == "running" else 0, "batch_size": row.batch_size,
            "partner": row.partner if row.state == "running" else None, "step": row.step, "samples": row.samples,
            "target": row.target, "target_unit": "steps" if row.spec.steps else "samples",
            "progress": round(row.done / row.target, 4) if row.target else None,
            "samples_per_s": round(row.samples_per_s, 2) if row.samples_per_s else None,
            "restarts": row.restarts, "crashes": row.crashes, "adaptive": row.spec.adaptive,
            "application": row.spec.app, "error": row.error or row.invalid, "submitted_at": row.submitted_at,
            "finished_at": row.finished_at,
            "waiting": reasons.get(row.name) if row.state == "queued" else None,
            # e.g. why it is not scaled up, or why its group is time-sliced rather than under MPS
            "note": (reasons.get(row.name) or sharing.get(row.name)) if row.state == "running" else None,
            "sharing_why": sharing.get(row.name) if row.state == "running" else None,
            "slowdown": round(slowdown[0], 3) if slowdown is not None else None,
            "slowdown_basis": slowdown[1] if slowdown is not None else None,  # its solo time: measured or estimated
            "memory_limit_gib": round(limit / 2**30, 3) if limit else None,
            "max_slowdown": row.spec.requirements.max_slowdown, "exclusive": row.spec.requirements.exclusive,
            "ooms": int(memory.get(row.name, {}).get("ooms", 0)),
            **gradient_noise.shown(gradients.get(row.name), row.batch_size, row.spec.batch_size)})
    return out


def job_gradients(state: StateStore) -> dict[str, gradient_noise.GradientStats]:
    """Each job's smoothed gradient statistics (``grad_sqr`` |G|², ``grad_var`` tr Σ, ``lr``); shown with the noise
    scale tr Σ / |G|² and the statistical efficiency at the job's batch (:mod:`scheduler.learning.gradient_noise`)."""
    return {job: gradient_noise.from_row(r) for job, r in state.gradients().items()}


def jobs_snapshot(state: StateStore) -> dict[str, Any]:
    """What ``colocate jobs`` shows (and ``--json`` prints): every job, the learned tables, the rounds, the server,
    failing rounds and set-aside rows. The API's ``jobs`` call answers the same (less others' jobs under
    ``--private-data``)."""
    from scheduler.service.state.health import failures_view

    return {"jobs": job_views(state), "learned": learned_view(state), "rounds": state.meta_value("rounds") or 0,
            "last_round": state.meta("last_round"), "server": server_status(state),
            "round_failures": failures_view(state), "set_aside": set_aside_view(state)}


def sharing_notes(state: StateStore, groups: Mapping[str, GroupRecord] | None = None) -> dict[str, str]:
    """Why each running job's group does not share its GPUs as serve's ``--sharing`` says (its group document's
    ``sharing_why``: e.g. MPS across owners on a node whose MPS serves one user at a time), by job name; ``groups``:
    the state's groups when the caller has read them already."""
    out: dict[str, str] = {}
    for group in (state.groups() if groups is None else groups).values():
        if group.doc.sharing_why:
            out.update(dict.fromkeys(group.doc.names, group.doc.sharing_why[:300]))
    return out


def running_limits(state: StateStore, groups: Mapping[str, GroupRecord] | None = None) -> dict[str, int]:
    """The memory limit (bytes per GPU) each member of a running group was started with (its group document);
    ``groups``: the state's groups when the caller has read them already."""
    return {job.name: job.memory_limit_bytes for group in (state.groups() if groups is None else groups).values()
            for job in group.doc.jobs if job.memory_limit_bytes is not None}


def learned_view(state: StateStore) -> dict[str, Any]:
    """The learned tables: solo iteration times per configuration and pair ratios, with sample counts; each
    with its ``source`` (``run``: measured while jobs ran, ``probe``: by automatic probes, or both); the probes;
    the gradient statistics each job reported (``gradients``: noise scale, efficiency at its batch)."""
    from scheduler.service.state.probe_records import META_KEY, load_records, probe_samples

    measurements = state.measurements()
    probes = load_records(state.meta(META_KEY))
    by_probe = probe_samples(probes)

    counts: dict[tuple[Any, ...], int] = {
        (m["application"], m["gpu_type"], m["num_gpus"], m["batch_size"], m["partner_type"]): int(m["count"])
        for m in measurements}

    def source(*keys: tuple[Any, ...]) -> str:
        probed = sum(by_probe.get(k, 0) for k in keys)
        return "run" if not probed else "probe" if probed >= sum(counts.get(k, 0) for k in keys) else "probe+run"

    solo = [{**m, "samples_per_s": round(m["batch_size"] / m["iter_time_s"], 3),
             "source": source((m["application"], m["gpu_type"], m["num_gpus"], m["batch_size"], ""))}
            for m in measurements if not m["partner_type"]]
    pairs = []
    for r in learned_ratios(measurements, SoloTimes(measurements)):
        (app_a, _, batch_a), (app_b, _, batch_b) = r["type_a"].rpartition("@"), r["type_b"].rpartition("@")
        keys = ((app_a, r["gpu_type"], r["num_gpus"], int(batch_a), r["type_b"]),
                (app_b, r["gpu_type"], r["num_gpus"], int(batch_b), r["type_a"]))
        pairs.append({**r, "source": source(*keys)})
    shown = [{k: v for k, v in p.items() if k not in ("doc", "handle", "wrote", "members")} for p in probes]
    stats = job_gradients(state)
    rows = {r.name: r for r in state.jobs()} if stats else {}
    gradients = [{"job": job, "application": rows[job].spec.app, "batch_size": rows[job].batch_size or rows[job].spec.batch_size,
                  "base_batch": rows[job].spec.batch_size,
                  **gradient_noise.shown(g, rows[job].batch_size or rows[job].spec.batch_size, rows[job].spec.batch_size)}
                 for job, g in sorted(stats.items()) if job in rows]
    return {"throughput": solo, "colocation": pairs, "probes": shown, "gradients": gradients}


def server_status(state: StateStore) -> dict[str, Any]:
    """Whether a ``colocate serve`` holds the state directory now (its lock, :mod:`.lock`), its pid and the time of
    its last round (``heartbeat``)."""
    from scheduler.service.state.lock import server_running

    running = server_running(state.dir)
    return {"running": running, "pid": state.meta_value("server_pid") if running else None,
            "heartbeat": state.meta_value("heartbeat")}


def set_aside_view(state: StateStore) -> list[dict[str, str]]:
    """The rows the reads so far set aside as damaged (:mod:`.rows`): table, key and problem."""
    return [{"table": table, "key": key, "problem": problem} for (table, key), problem in sorted(state.set_aside.items())]


def learned_pairs(pairs: list[dict[str, Any]]) -> int:
    """Pairs learned: both members measured together and alone (the rows ``colocate learned --out`` writes).
    ``colocate learned`` and the ``colocate_learned_pairs`` metric both count these."""
    return sum(1 for p in pairs if p.get("solo_source") == "measured")
