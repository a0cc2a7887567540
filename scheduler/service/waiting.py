"""Why each waiting job waits, decided once per round and stored in the state (``colocate jobs`` shows it).

============================  =======================================================================
code                          meaning
============================  =======================================================================
``no-gpu-type``               no GPU type of the cluster (of its ``gpu_types``) has ``min_gpus`` GPUs
``gpus-freeing``              allocated; its GPUs are still held by a group that is stopping, or a probe
``unplaced``                  allocated, but no node had its GPUs free together (fragmentation)
``resume-cost``               GPUs are free, but resuming it (it was stopped before) costs its restart
                              factor, more than it would gain now
``not-worth-it``              GPUs are free, but running it there is worth less than leaving it waiting
                              (its goodput on them is below the objective's bar)
``would-hurt-partner``        all GPUs busy; sharing with every job it could pair with is predicted to
                              pay too little (Σ ratios < 1 + β) or is unknown
``slowdown-bound``            all GPUs busy; a pair would pay, but it or its partner would run slower
                              than its slowdown bound (``max_slowdown``)
``exclusive``                 all GPUs busy; it, or every job it could share with, never shares its GPUs
                              (``exclusive: true``)
``fair-share``                all GPUs busy with jobs at their share; it starts when one ends or when a
                              change pays for its restarts
``start-failed``              the backend could not start its group; tried again after a backoff
                              (set by the server: :class:`scheduler.service.groups.StartRetries`)
============================  =======================================================================

A *running* adaptive job on fewer GPUs than it may use while GPUs of its type stay idle gets a reason too
(``colocate jobs`` shows it, the waiting-jobs metric does not count it):

============================  =======================================================================
``held``                      within its minimum run (or still warming up): it keeps its allocation
``not-scaled``                more GPUs are predicted to add too little goodput (the figure is shown) to
                              pay for the restart a resize costs, or none at all
``backend-pending``           (any running job) its group waits in the backend's own queue (Slurm's pending
                              reason; set by the server from :attr:`GroupPoll.unstarted`)
============================  =======================================================================
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from common.safe_load import stored_json
from scheduler.service.state.store import QUEUED, RUNNING, JobRow

if TYPE_CHECKING:  # pragma: no cover  (``colocate jobs`` reads the reasons without importing the scheduler)
    from scheduler.model.cluster import Cluster
    from scheduler.model.jobs import Job
    from scheduler.model.policy import Placement, Policy, RoundDecision

META_KEY = "waiting"
PACKING_POLICIES = ("colocate", "colocate-triples", "gandiva", "gavel-packed")


def reasons(rows: Sequence[JobRow], cluster: Cluster, decision: RoundDecision | None, placement: Placement | None,
            pending: Sequence[Any], table: Any, jobs: Sequence[Job], policy: Policy,
            model: Any = None) -> dict[str, dict[str, str]]:
    """``{job: {"code", "text"}}`` for every queued job that did not start this round, and every running adaptive
    job kept on fewer GPUs than it may use while some of its type are idle (``model``: the round's goodput)."""
    allocated = decision.by_job() if decision else {}
    used = decision.gpus_used() if decision else {}
    unplaced = set(placement.unplaced) if placement else set()
    freeing = {slot.job for unit in pending for slot in unit}
    by_name = {j.name: j for j in jobs}
    out = {}
    for row in rows:
        if row.state == RUNNING:
            note = _not_scaled(row, cluster, used, allocated, by_name, model)
            if note is not None:
                out[row.name] = {"code": note[0], "text": note[1]}
            continue
        if row.state != QUEUED:
            continue
        if row.name in freeing:
            code, text = "gpus-freeing", "its GPUs are still held by a group that is stopping, or a probe"
        elif row.name in unplaced:
            code, text = "unplaced", "allocated, but no node had its GPUs free together"
        elif row.name in allocated:
            continue  # started this round
        else:
            code, text = _unallocated(row, cluster, used, allocated, table, by_name, policy)
        out[row.name] = {"code": code, "text": text}
    return out


def _not_scaled(row: JobRow, cluster: Cluster, used: dict[str, int], allocated: dict[str, Any],
                jobs: dict[str, Job], model: Any) -> tuple[str, str] | None:
    """Why a running adaptive job stays on fewer GPUs than it may use while GPUs of its type are idle."""
    job, where = jobs.get(row.name), allocated.get(row.name)
    if job is None or where is None or not row.spec.adaptive or where.others:
        return None
    n, gpu = where.num_gpus, where.gpu_type
    ceiling = min(row.spec.max_gpus or cluster.capacity(gpu), cluster.capacity(gpu))
    idle = cluster.capacity(gpu) - used.get(gpu, 0)
    if n >= ceiling or idle <= 0:
        return None
    more = min(ceiling, n + idle)
    if job.pinned:
        return "held", (f"on {n} of up to {ceiling} GPU(s), {idle} idle: it keeps its allocation for its minimum run "
                        "(a resize restarts it)")
    now = model.estimate(job, gpu, n) if model is not None else None
    then = model.estimate(job, gpu, more) if model is not None else None
    if now is None or then is None or not now.goodput > 0:
        return "not-scaled", f"on {n} of up to {ceiling} GPU(s), {idle} idle: no goodput estimate for {more} GPU(s)"
    gain = then.goodput / now.goodput
    return "not-scaled", (f"on {n} of up to {ceiling} GPU(s), {idle} idle: {more} GPU(s) are predicted at "
                          f"×{gain:.2f} its goodput, too little to pay for the restart a resize costs")


def _types(row: JobRow, cluster: Cluster) -> list[str]:
    return [t for t in cluster.type_names if not row.spec.gpu_types or t in row.spec.gpu_types]


def _unallocated(row: JobRow, cluster: Cluster, used: dict[str, int], allocated: dict[str, Any], table: Any,
                 jobs: dict[str, Job], policy: Policy) -> tuple[str, str]:
    need = row.spec.min_gpus
    types = [t for t in _types(row, cluster) if cluster.capacity(t) >= need]
    if not types:
        shown = ", ".join(f"{t}×{cluster.capacity(t)}" for t in cluster.type_names)
        return "no-gpu-type", f"needs {need} GPU(s) of one type; the cluster has {shown}"
    free = {t: cluster.capacity(t) - used.get(t, 0) for t in types}
    if any(n >= need for n in free.values()):
        if row.restarts > 0:
            return "resume-cost", (f"{max(free.values())} GPU(s) free, but resuming after {row.restarts} restart(s) "
                                   "costs more than it would gain now")
        return "not-worth-it", f"{max(free.values())} GPU(s) free, but its goodput there is below the objective's bar"
    most = max(0, *free.values())
    # Some GPUs may be free, only too few of one type for this job: saying "all busy" would contradict `jobs`.
    busy = (f"needs {need} GPUs of one type together; {most} free" if most > 0
            else f"all {sum(cluster.capacity(t) for t in types)} GPU(s) busy")
    if row.spec.requirements.exclusive:
        return "exclusive", f"{busy}; it never shares its GPUs (exclusive: true)"
    if policy.name in PACKING_POLICIES and table is not None and row.name in jobs:
        from scheduler.ilp.policy import PackingPolicy  # the server's side only: jobs never gets here

        beta = policy.config.min_benefit if isinstance(policy, PackingPolicy) else 0.0
        me = jobs[row.name]
        partners = [(a, jobs[a.job]) for a in allocated.values() if a.gpu_type in types and a.job in jobs
                    and a.num_gpus == me.num_gpus and not a.others]
        known = [(sum(r), other.name) for a, other in partners if (r := table.lookup(a.gpu_type, me, other))]
        from scheduler.model.colocation import BoundedTable

        bounded = BoundedTable(table.ratios, inner=table, default_bound=policy.traits.max_slowdown)
        paying = [(total, name) for total, name in known if total >= 1.0 + beta]
        if paying and not any(bounded.lookup(a.gpu_type, me, other) for a, other in partners):
            if all(other.requirements.exclusive for _, other in partners):
                return "exclusive", f"{busy}; the jobs it could share with never share their GPUs (exclusive: true)"
            return "slowdown-bound", (f"{busy}; sharing with {max(paying)[1]} would pay (Σ t/t′ "
                                      f"{max(paying)[0]:.2f}) but slow it or its partner past a slowdown bound")
        if partners and not paying:
            best = (f"; the best, with {max(known)[1]}, is believed at Σ t/t′ {max(known)[0]:.2f}" if known
                    else "; none of the pairs is known")
            return "would-hurt-partner", (f"{busy}; sharing with any of {len(partners)} running "
                                          f"job(s) is predicted to pay less than 1 + {beta:g}{best}")
    return "fair-share", (f"{busy}; {len(allocated)} job(s) running at their share; it starts when one "
                          "ends or a change pays for its restarts")


def dumps(reasons: dict[str, dict[str, str]]) -> str:
    return json.dumps(reasons, sort_keys=True)


def loads(text: str | None) -> dict[str, dict[str, str]]:
    """The stored reasons (empty when none or unreadable: an older state directory)."""
    return stored_json(text, dict)
