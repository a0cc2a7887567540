"""From a unit of the decision to a GPU group and the document its supervisor runs.

What a job runs is resolved by the same code as ``colocate launch`` (:func:`scheduler.executor.plan.build_plan`:
a model of the zoo → the built-in trainer; a command → the user's command with its placeholders filled
in), and started the same way (:func:`scheduler.executor.command.job_argv`). On top, every job gets its
own directory in the state directory and the environment of the checkpoint-restore contract:

==============================  ===============================================================
``COLOCATE_JOB`` ...            as for ``colocate launch`` (name, batch, GPU count and type, partner, group)
``COLOCATE_PROGRESS_FILE``      where to write progress JSON (``step``, ``samples``, ``state``, ...)
``COLOCATE_CHECKPOINT``         the checkpoint file: load it at start if present, write it on SIGTERM
``COLOCATE_TARGET_STEPS``       the job's target (or ``COLOCATE_TARGET_SAMPLES``), counted from its first start
``COLOCATE_JOB_DIR``            the job's directory (log, progress, checkpoint)
``COLOCATE_MEMORY_LIMIT_BYTES`` a member of a group: its hard GPU-memory limit per GPU (:mod:`.memory`); unset alone
``COLOCATE_OOM_FILE``           where a job that runs out of memory writes what it reached (``oom.json``)
``COLOCATE_LR_SCALING``         the job file's ``lr_scaling``, where it names one (the job library applies it)
==============================  ===============================================================

A group the backend could not start leaves nothing in ``runs/`` (:func:`remove_group_files`), and its jobs are
tried again after a backoff (:class:`StartRetries`), not every round.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.lr_scaling import LR_SCALING_ENV
from common.owners import REFUSE, RUN_SELF, Owner, may_run_as
from scheduler.executor.command import RunSettings, job_argv
from scheduler.executor.group_doc import GroupDoc, GroupMember, Placement
from scheduler.executor.plan import GpuGroup, build_plan, job_environment
from scheduler.executor.supervise import CHECKPOINT_FILE, OOM_FILE, PROGRESS_FILE
from scheduler.service.rounds import row_owner
from scheduler.service.state.store import QUEUED, RUNNING

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.cluster import Cluster
    from scheduler.model.owners import OwnerPlanning
    from scheduler.service.config import ServeConfig
    from scheduler.service.rounds import Unit
    from scheduler.service.state.store import JobRow, Transaction


def job_dir(state_dir: Path, name: str) -> Path:
    return state_dir / "jobs" / name


def group_sharing(unit: "Unit", rows: dict[str, "JobRow"], config: "ServeConfig",
                  owners: "OwnerPlanning | None" = None) -> tuple[str, str]:
    """How the unit's jobs share their GPUs, and why when it is not ``config.sharing`` (jobs of several owners on a
    GPU type whose MPS serves one user at a time time-slice: :mod:`scheduler.model.owners`); a group the rule never
    allows (the round does not plan one) raises."""
    if owners is None or len(unit) < 2:
        return config.sharing, ""
    sharing, why = owners.group_sharing(unit[0].gpu_type, config.sharing, [row_owner(rows[s.job])[0] for s in unit])
    if sharing is None:
        raise PermissionError(why)
    return sharing, why


def build_group(unit: "Unit", rows: dict[str, "JobRow"], config: "ServeConfig",
                owners: "OwnerPlanning | None" = None) -> GpuGroup:
    """The GPU group of one unit (one job, or a pair or three sharing the same GPUs)."""
    data = {"allocations": [
        {"job": s.job, "gpu_type": s.gpu_type, "num_gpus": s.num_gpus, "batch_size": s.batch_size,
         "partner": s.others[0] if s.others else None, "partners": list(s.others), "node": s.nodes[0],
         "nodes": list(s.nodes), "gpus": list(s.gpus)} for s in unit]}
    specs = {s.job: rows[s.job].spec for s in unit}
    plan = build_plan(data, source="colocate serve",
                      applications={n: spec.model for n, spec in specs.items() if spec.model},
                      commands={n: spec.command for n, spec in specs.items() if spec.command},
                      sharing=group_sharing(unit, rows, config, owners)[0])
    group = plan.groups[0]
    jobs = tuple(replace(job, image_size=specs[job.name].image_size) if job.builtin else job for job in group.jobs)
    return replace(group, jobs=jobs)


def owner_planning(cluster: "Cluster", config: "ServeConfig", backend: str) -> "OwnerPlanning":
    """How this server's jobs of several owners may share a GPU (:mod:`scheduler.model.owners`). Owners matter only
    when jobs run as their owners (``--users multi``; otherwise every job is the server's user's): then a sharing
    mode that serves one user at a time (MPS) time-slices groups of several owners on types whose MPS is not
    multi-user, planned with the bundled time-slicing ratios of the cluster's types (none: such groups are not
    planned), and the Slurm backend groups no two owners (a batch job runs as one user)."""
    from profiler.gpu.sharing import sharing_mode
    from scheduler.formats.bundled import measured_table
    from scheduler.model.owners import TIMESLICE, OwnerPlanning, OwnerRule, owner_rule

    if config.users != "multi":
        return OwnerPlanning(OwnerRule())
    rule = owner_rule(cluster, one_user_at_a_time=sharing_mode(config.sharing).one_user_at_a_time,
                      one_uid_per_group=backend == "slurm")
    fallback = TIMESLICE in rule.across.values()
    return OwnerPlanning(rule, measured_table(cluster.type_names, TIMESLICE) if fallback else None)


def run_as(owner_uid: int | None, users: str) -> Owner | None:
    """The user a job of ``owner_uid`` runs as, by the rule of :func:`common.owners.may_run_as` (``users``: serve's
    ``--users``): None for the server itself (an owner unknown is the server's own user, as before owners were
    recorded); a refused job raises (its start fails with the reason)."""
    if owner_uid is None:
        return None
    decision = may_run_as(os.getuid(), owner_uid, users)
    if decision.kind == REFUSE:
        raise PermissionError(decision.reason)
    if decision.kind == RUN_SELF:
        return None
    try:
        return Owner.of_uid(owner_uid)
    except KeyError:
        raise PermissionError(f"uid {owner_uid} has no account on this machine") from None


def group_document(key: str, group: GpuGroup, rows: dict[str, "JobRow"], config: "ServeConfig",
                   state_dir: Path, limits: Mapping[str, int | None] | None = None,
                   sharing_why: str = "") -> GroupDoc:
    """What :func:`scheduler.executor.supervise.supervise` runs (see its docstring for the format); ``limits``:
    each member's memory limit in bytes per GPU (None alone). Each member runs as the user the rule of
    ``config.users`` says for its owner (:func:`run_as`, :func:`scheduler.service.rounds.row_owner`);
    ``sharing_why``: why the group does not share as ``config.sharing`` says (:func:`group_sharing`), kept in the
    document as ``sharing_why`` for ``colocate jobs``."""
    jobs: list[GroupMember] = []
    for job in group.jobs:
        try:
            owner = run_as(row_owner(rows[job.name])[1], config.users)
        except PermissionError as err:
            raise PermissionError(f"job {job.name}: {err}") from None
        spec = rows[job.name].spec
        directory = job_dir(state_dir, job.name)
        directory.mkdir(parents=True, exist_ok=True)
        settings = RunSettings(device=config.device, steps=spec.steps or 0, threads=config.threads,
                               log_every=config.log_every)
        progress = directory / PROGRESS_FILE
        env = {**job_environment(job, group), "COLOCATE_PROGRESS_FILE": str(progress),
               "COLOCATE_CHECKPOINT": str(directory / CHECKPOINT_FILE), "COLOCATE_JOB_DIR": str(directory)}
        if spec.steps:
            env["COLOCATE_TARGET_STEPS"] = str(spec.steps)
        else:
            env["COLOCATE_TARGET_SAMPLES"] = str(spec.samples)
        env["COLOCATE_OOM_FILE"] = str(directory / OOM_FILE)
        if spec.lr_scaling is not None:
            env[LR_SCALING_ENV] = spec.lr_scaling
        limit = (limits or {}).get(job.name)
        if limit is not None:
            env["COLOCATE_MEMORY_LIMIT_BYTES"] = str(limit)
        argv = job_argv(job, settings, python=config.python, progress_file=str(progress))
        jobs.append(GroupMember(job.name, str(directory), tuple(argv), env, limit, owner))
    # the GPUs it holds, kept with the group: busy while it runs, even where its members' rows cannot be read
    placement = Placement(group.gpu_type, tuple(group.nodes), tuple(group.gpus))
    return GroupDoc(key, group.sharing, str(state_dir / "runs" / f"{key}.pid"), tuple(jobs), gpu=config.device != "cpu",
                    grace_s=float(config.stop_grace_s), placement=placement, sharing_why=sharing_why)


def last_group_number(state: Any) -> int:
    """The state's group counter; when it is missing or was set aside as damaged, the highest group number ever
    started there (each group left its document in ``runs/``), so no group key is used twice."""
    counted = state.meta_value("groups")
    if counted is not None:
        return int(counted)
    numbers = [int(p.stem[1:]) for p in (state.dir / "runs").glob("g*.json") if p.stem[1:].isdigit()]
    return max([0, *numbers, *(int(k[1:]) for k in state.groups() if k[1:].isdigit())])


def remove_group_files(runs: Path, key: str) -> None:
    """What a group that never started left in ``runs/`` (its document, its batch script): a start the backend
    refused leaves nothing behind, however often it is tried."""
    for path in runs.glob(f"{key}.*"):
        if path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)


class StartRetries:
    """Jobs whose group the backend could not start (``sbatch`` refused it, the controller did not answer, Slurm
    left it pending too long): tried again after a backoff that doubles with each failure in a row, from
    ``FIRST_RETRY_S`` up to ``MAX_RETRY_S``, so a cluster manager that does not answer costs one attempt per
    backoff, not one per round. In memory: a restarted server tries at once."""

    FIRST_RETRY_S = 10.0
    MAX_RETRY_S = 600.0

    def __init__(self) -> None:
        self._failed: dict[str, tuple[int, float, str]] = {}  # job -> (failures in a row, next try (monotonic), why)

    def failed(self, names: list[str], why: str) -> float:
        """Record a failed start of ``names``' group; returns the seconds until it is tried again."""
        count = 1 + max((self._failed[n][0] for n in names if n in self._failed), default=0)
        delay = min(self.FIRST_RETRY_S * 2 ** (count - 1), self.MAX_RETRY_S)
        for name in names:
            self._failed[name] = (count, time.monotonic() + delay, why)
        return delay

    def requeue(self, db: "Transaction", names: list[str], why: str, failed: bool = True) -> None:
        """Jobs whose group never started back to the queue (no crash, no restart): a failed start is tried again
        after its backoff (event ``start-failed``), a group the server stopped before it started at once."""
        when = f"; next try in {self.failed(names, why):.0f} s" if failed else ""
        for name in names:
            db.update_job(name, state=QUEUED, group_key=None)
            db.event(name, "start-failed" if failed else "stopped", why[:300] + when)

    def started(self, names: list[str]) -> None:
        for name in names:
            self._failed.pop(name, None)

    def waiting(self, names: list[str]) -> bool:
        """Whether a member of a unit waits for its next try."""
        now = time.monotonic()
        return any(name in self._failed and self._failed[name][1] > now for name in names)

    def reasons(self, rows: list["JobRow"], unstarted: Mapping[str, str]) -> dict[str, dict[str, str]]:
        """Why a job's group has not started (``colocate jobs`` shows it): its last start failed (a queued job:
        ``start-failed``), or it waits in the backend's queue (``unstarted``: group -> why; ``backend-pending``)."""
        now, out = time.monotonic(), {}
        for row in rows:
            if row.state == RUNNING and row.group_key is not None and row.group_key in unstarted:
                out[row.name] = {"code": "backend-pending", "text": unstarted[row.group_key]}
            elif row.state == QUEUED and row.name in self._failed:
                count, due, why = self._failed[row.name]
                when = f"next try in {due - now:.0f} s" if due > now else "tried again when next placed"
                out[row.name] = {"code": "start-failed", "text": f"its group could not start ({count}× in a row): "
                                                                f"{why}; {when}"[:500]}
        return out
