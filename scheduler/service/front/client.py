"""The user-side operations on a state directory: ``submit``, ``cancel`` and ``state check``.

Each goes through the running server's API (:mod:`scheduler.service.front.remote`: its socket next to ``--state``,
or ``--server URL``) and only where no server answers and the caller owns the state directory does it work on the
database itself. Each validates everything before it writes anything, and only ``submit`` (and ``cancel`` of a
job that exists) opens the database for writing: a failing ``cancel`` and ``state check`` create nothing.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from common.errors import InputError
from scheduler.service.admission import check_feasible, cluster_gpus, known_cluster
from scheduler.service.jobs.jobspec import load_job
from scheduler.service.state.store import FINAL_STATES, StateStore


def submit_jobs(job_files: list[Path] | list[str], state_dir: str | Path | None,
                cluster_path: str | Path | None = None, server: str | None = None) -> list[str]:
    """Validate every job file (against ``cluster_path``, else the cluster the last server recorded), then
    queue them in order in one transaction: a bad file (or a name already used) queues none of them.
    Returns the names. The files are read here, with the caller's rights; the server checks them again."""
    from scheduler.service.front.remote import connect

    client = connect(Path(state_dir) if state_dir is not None else None, server)
    if client is not None:
        cluster = None
        if cluster_path is not None:
            from scheduler.model.cluster import load_cluster

            cluster = cluster_gpus(load_cluster(cluster_path))
        specs = [(load_job(f, gpu_types=tuple(cluster) if cluster is not None else None), f) for f in job_files]
        for spec, f in specs:
            check_feasible(spec, cluster, source=str(f))
        return list(client.call("submit", {"jobs": [{"spec": spec.to_dict(), "source": str(f)} for spec, f in specs]})["names"])
    gpus = None
    if cluster_path is not None:
        from scheduler.model.cluster import load_cluster

        gpus = cluster_gpus(load_cluster(cluster_path))
    specs = [(load_job(f, gpu_types=tuple(gpus) if gpus is not None else None), f) for f in job_files]
    cluster = gpus if gpus is not None else _recorded_cluster(state_dir or ".")
    for spec, f in specs:  # every check before the first write: a refused submit creates nothing
        check_feasible(spec, cluster, source=str(f))
    store = StateStore(state_dir or ".")
    try:
        return store.submit_many([(spec, str(f)) for spec, f in specs])
    finally:
        store.close()


def _recorded_cluster(state_dir: str | Path) -> dict[str, int] | None:
    """The cluster the last server on ``state_dir`` recorded, read without creating anything (None: none)."""
    if not Path(state_dir).is_dir():
        return None
    reader = StateStore(state_dir, create=False, readonly=True)
    try:
        return known_cluster(reader)
    finally:
        reader.close()


def cancel_job(state_dir: str | Path | None, name: str, server: str | None = None) -> str:
    """Request the cancellation of job ``name``; returns its state before (final states are left alone)."""
    from scheduler.service.front.remote import connect

    client = connect(Path(state_dir) if state_dir is not None else None, server)
    if client is not None:
        return str(client.call("cancel", {"name": name})["previous"])
    reader = StateStore(state_dir or ".", create=False, readonly=True)
    try:
        row = reader.job(name)
        if row is None or row.state in FINAL_STATES:
            return reader.request_cancel(name)  # the error naming the known jobs, or the final state
    finally:
        reader.close()
    writer = StateStore(state_dir or ".", create=False)
    try:
        return writer.request_cancel(name)
    finally:
        writer.close()


def check_state(state_dir: str | Path | None, server: str | None = None) -> dict[str, Any]:
    """Open the state read-only and check it: SQLite's integrity check, the schema version and tables' columns,
    every job's spec against the validator, every row of every table and every meta value (:mod:`.rows`).
    Returns a summary (``invalid``: jobs whose spec fails; ``set_aside``: damaged rows, each with its table, key
    and problem); a database that cannot be used at all is an :class:`InputError`. With a server running: its
    answer (an admin's call)."""
    from scheduler.service.front.remote import connect

    client = connect(Path(state_dir) if state_dir is not None else None, server)
    if client is not None:
        return dict(client.call("check"))
    store = StateStore(state_dir or ".", create=False, readonly=True)
    try:
        if not store.path.exists():
            raise InputError("no state database here", source=store.path, field="state",
                             valid="the --state DIR of a colocate serve or submit")
        return check_store(store)
    finally:
        store.close()


def check_store(store: StateStore) -> dict[str, Any]:
    """:func:`check_state` on an open store (the running server's, through its API)."""
    from scheduler.service.state.health import failures_view
    from scheduler.service.state.opening import database_errors

    with database_errors(store.path, store.lock_wait_s):
        integrity = [r[0] for r in store._conn.execute("PRAGMA integrity_check")]
    if integrity != ["ok"]:
        raise InputError(f"fails SQLite's integrity check ({integrity[0][:120]})", source=store.path,
                         field="--state", valid="a copy that passes; see docs/hardening.md")
    rows = store.jobs()
    groups, measurements, events = store.groups(), store.measurements(), store.events()
    store.gradients()  # its damaged rows are set aside too
    store.check_meta()
    return {"path": str(store.path), "schema_version": store.meta("schema_version"),
            "jobs": dict(Counter(r.state for r in rows)), "groups": len(groups),
            "measurements": len(measurements), "events": len(events),
            "round_failures": failures_view(store), "invalid": {r.name: r.invalid for r in rows if r.invalid},
            "set_aside": [{"table": t, "key": k, "problem": p} for (t, k), p in sorted(store.set_aside.items())]}
