"""What may run: feasibility against the cluster, and the server's guards that fail one job, not the server.

``submit`` refuses a job the cluster can never run (GPU types it lacks, more GPUs of one type than exist)
when the cluster is known: the one the last ``colocate serve`` recorded in the state (``meta.cluster``),
or ``submit --cluster``. The server checks every active job each round (:func:`screen`): a job whose
stored spec fails the validator (written behind ``submit``'s back) is failed with the reason; a job that
does not fit the cluster it serves waits with the reason in its ``error`` column (the cluster may grow on
a restart) and is kept out of the policy's input. :func:`fail_jobs` is what the server does when building
or starting one group fails for reasons of its own jobs (placement, command filling): those jobs fail,
the others go on.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from common.errors import InputError
from common.names import is_safe_name
from common.untrusted import printable
from scheduler.service.jobs.jobspec import JobSpec
from scheduler.service.state.store import FAILED, QUEUED, JobRow, StateStore, Transaction

CLUSTER_META = "cluster"
WAITING = "waiting: "  # prefix of the error column of a job that cannot run on the cluster served now


def cluster_gpus(cluster: Any) -> dict[str, int]:
    """GPUs per type of a :class:`~scheduler.model.cluster.Cluster` (what feasibility needs)."""
    return {t.name: t.total_gpus for t in cluster}


def record_cluster(state: StateStore, cluster: Any) -> None:
    """Remember the served cluster in the state, so ``submit`` can refuse jobs it can never run."""
    with state.transaction() as db:
        db.set_meta(CLUSTER_META, json.dumps(cluster_gpus(cluster), sort_keys=True))


def known_cluster(state: StateStore) -> dict[str, int] | None:
    """The cluster the last server recorded (None: no server ran on this state yet, or unreadable)."""
    text = state.meta(CLUSTER_META)
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(data, dict) or not all(isinstance(v, int) for v in data.values()):
        return None
    return {str(k): v for k, v in data.items()}


def infeasible(spec: JobSpec, gpus: Mapping[str, int]) -> str | None:
    """Why ``spec`` can never run on a cluster with ``gpus`` per type (None: it can)."""
    have = ", ".join(f"{n}×{t}" for t, n in sorted(gpus.items())) or "no GPUs"
    usable = {t: n for t, n in gpus.items() if not spec.gpu_types or t in spec.gpu_types}
    if not usable:
        return f"the cluster has no GPU of type {', '.join(spec.gpu_types)} (it has {have})"
    most = max(usable.values())
    if spec.min_gpus > most:
        return f"needs {spec.min_gpus} GPUs of one type; the cluster has at most {most} (it has {have})"
    return None


def check_feasible(spec: JobSpec, gpus: Mapping[str, int] | None, *, source: str) -> None:
    """An :class:`InputError` when ``spec`` can never run on the known cluster."""
    if gpus is None:
        return
    reason = infeasible(spec, gpus)
    if reason is not None:
        field = "gpu_types" if "type" in reason.split(";")[0] else "min_gpus"
        raise InputError(reason, source=source, field=field, valid="GPU types and counts the cluster has")


def screen(state: StateStore, rows: list[JobRow], cluster: Any) -> list[JobRow]:
    """The rows the policy may see this round: invalid ones failed, infeasible ones waiting with the reason."""
    gpus = cluster_gpus(cluster)
    keep, bad, waiting = [], [], []
    for row in rows:
        if row.invalid:
            bad.append((row.name, row.invalid))
            continue
        reason = infeasible(row.spec, gpus)
        if reason is None:
            keep.append(row)
            if row.error.startswith(WAITING):  # the cluster grew since
                waiting.append((row, ""))
        elif row.state == QUEUED:
            waiting.append((row, WAITING + reason))
        else:
            keep.append(row)  # running already: leave it be
    if bad:
        fail_jobs(state, bad, "invalid")
    news = [(row, text) for row, text in waiting if row.error != text]
    if news:
        with state.transaction() as db:
            for row, text in news:
                db.update_job(row.name, error=text)
                if text:
                    db.event(row.name, "waiting", text)
    return keep


def fail_jobs(state: StateStore, failures: Iterable[tuple[str, str]], kind: str) -> None:
    """Mark jobs failed with their reasons (one transaction), releasing whatever they held."""
    with state.transaction() as db:
        for name, reason in failures:
            db.update_job(name, state=FAILED, finished_at=time.time(), error=reason[:1000], group_key=None,
                          sample_step=None, sample_elapsed=None)
            db.event(name, "failed", f"{kind}: {reason}"[:1000])


def culprits(error: Exception, names: list[str]) -> list[str]:
    """The jobs of a unit an error while building its group names (all of them when it names none)."""
    text = str(error)
    named = [n for n in names if repr(n) in text or f"'{n}'" in text or f"field '{n}'" in text]
    field = (error.field or "") if isinstance(error, InputError) else ""
    if field.startswith("allocations[") and "]" in field:
        index = field[len("allocations["):field.index("]")]
        if index.isdigit() and int(index) < len(names):
            named.append(names[int(index)])
    return sorted(set(named)) or list(names)


class UnitProblem(Exception):
    """Building the group of one unit failed for reasons of its jobs (see :func:`unit_problems`)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


@contextmanager
def unit_problems() -> Iterator[None]:
    """Turn any error while building a group (placement, command filling, job directories) into a
    :class:`UnitProblem`, which the server settles by failing the jobs concerned (:func:`fail_unit`)."""
    try:
        yield
    except Exception as err:  # noqa: BLE001 - whatever one job's group raises must not stop the server
        raise UnitProblem(err) from err


def fail_unit(state: StateStore, names: list[str], error: Exception) -> None:
    """Fail the jobs of a unit that ``error`` names (all of them when it names none); the others of the
    unit stay queued for the next round."""
    reason = f"cannot start: {type(error).__name__}: {error}"
    failing = culprits(error, names)
    fail_jobs(state, [(n, reason) for n in failing], "start")
    others = [n for n in names if n not in failing]
    if others:
        with state.transaction() as db:
            for name in others:
                db.event(name, "start-failed", f"its partner failed to start: {reason}"[:300])


def stop_member(job_dir: Any) -> None:
    """Stop one member of a running group (a job that misbehaved), its partners running on."""
    from scheduler.executor.supervise import request_job_stop

    try:
        request_job_stop(job_dir)
    except OSError:  # its directory is no directory any more: its next start fences this copy (generation)
        pass


def record_set_aside(db: Transaction, set_aside: Mapping[tuple[str, str], str], recorded: set[tuple[str, str, str]]) -> None:
    """Each row the state's reads set aside (:mod:`.rows`) becomes one ``set-aside`` event (and a stderr line)
    per server: ``recorded`` holds those already told."""
    for (table, key), problem in sorted(set_aside.items()):
        if (table, key, problem) in recorded:
            continue
        recorded.add((table, key, problem))
        job = key if table == "jobs" and is_safe_name(key) else None
        db.event(job, "set-aside", f"{table} {key}: {problem}"[:1000])
        print(f"state: set aside {table} {key}: {printable(problem, 300)}", file=sys.stderr, flush=True)


def guarded_round(run: Callable[[], Any], state: StateStore) -> Any:
    """One round; an error that escapes it is logged with its traceback and recorded (:mod:`.state.health`), and
    the server goes on next round (None). A changed state database is not a round's error: it escapes."""
    from scheduler.service.state.health import StateChanged, round_failed

    try:
        return run()
    except StateChanged:
        raise
    except Exception as err:  # noqa: BLE001 - the server outlives any one round
        round_failed(state, err)
        return None
