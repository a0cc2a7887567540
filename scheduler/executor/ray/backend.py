"""Ray: one whole-GPU task per GPU group for ``colocate launch --backend ray``, one detached actor per group
for ``colocate serve``, both on a node of the group's GPU type.

**Launch** (:func:`run_plan_on_ray`).
The pair is the unit, as in the profiler's Ray backend: a task asks for ``num_gpus`` = the group's GPU count
(whole GPUs; with fractional GPUs Ray would choose the partner, not the scheduler) and a sliver of the
``accelerator_type:<NAME>`` resource of the group's type, then runs the group with the local executor
(:func:`scheduler.executor.local.run_groups`) on the GPUs Ray assigned — both jobs of a pair, MPS if the
group asks for it. Ray chooses the node and GPU indices inside the GPU type; the allocation's node and
GPU numbers are advisory here.

Progress: tasks report job statuses to a small actor
(:class:`~scheduler.executor.ray.progress_board.ProgressBoard`, alive before any task starts) that the driver polls.
Logs are written on the worker's node under the same ``--log-dir`` path (a shared file system makes them
visible on the driver); a failed job's last log line comes back in its status.
Ctrl-C or SIGTERM on the driver cancels every task with ``force=True``: the worker dies and its job
processes with it (``PR_SET_PDEATHSIG``).

**Live** (:class:`RayExecutor`, ``colocate serve``): a group is a *detached* named actor (:class:`GroupHost`, namespace
:data:`NAMESPACE`) that asks for the group's GPUs (whole GPUs: the scheduler, not Ray, picks partners)
and a sliver of ``accelerator_type:<TYPE>``; it starts the group's supervisor on its node with the GPUs Ray
assigned, and answers polls from that node's files. Detached actors outlive the driver: after ``kill -9``
of the server the restarted one finds each group's actor again by name. ``release`` kills the actor, which
returns its GPUs to Ray.

``ray`` is an optional extra: it is imported inside the functions only.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from common.errors import InputError
from common.signals import python_signal_handlers_kept, sigterm_as_interrupt
from profiler.campaign.ray_backend import ROUTING_FRACTION, require_ray, routing_resource
from scheduler.executor.base import GroupPoll, JobStatus, LaunchReport, LaunchSettings
from scheduler.executor.group_doc import GroupDoc
from scheduler.executor.local import run_groups
from scheduler.executor.plan import GpuGroup, LaunchPlan
from scheduler.executor.ray.progress_board import ProgressBoard

TASK_NAME_PREFIX = "colocate-group"
POLL_INTERVAL_S = 0.5


def run_group_task(group: GpuGroup, settings: LaunchSettings, board: Any) -> list[dict[str, Any]]:
    """Body of one Ray task: run ``group`` on the GPUs Ray assigned; report progress to ``board``."""
    import ray

    settings = replace(settings, python=sys.executable)  # this node's interpreter, not the driver's
    assigned = [str(g) for g in ray.get_gpu_ids()]
    node_id = ray.get_runtime_context().get_node_id()
    last_time: list[float] = [0.0]
    last_states: list[tuple[str, ...]] = [()]

    def report(statuses: list[JobStatus]) -> None:
        # at most every POLL_INTERVAL_S, but at once when a job changes state (one finished, one failed)
        now, states = time.monotonic(), tuple(s.state for s in statuses)
        if now - last_time[0] >= POLL_INTERVAL_S or states != last_states[0]:
            board.report.remote([{**s.to_dict(), "node_id": node_id} for s in statuses])
            last_time[0], last_states[0] = now, states

    result = run_groups([group], settings, gpu_assignment=lambda g: assigned, on_progress=report)
    return [{**s.to_dict(), "node_id": node_id} for s in result.jobs]


def check_ray(plan: LaunchPlan) -> None:
    """Refuse groups the cluster can never run (their tasks would wait forever)."""
    import ray

    resources = ray.cluster_resources()
    for group in plan.groups:
        group.require_single_node(plan.source, "on Ray")
        if resources.get("GPU", 0) < group.gpus_per_node:
            raise InputError(f"group {group.label} needs {group.gpus_per_node} GPUs; the Ray cluster has "
                             f"{resources.get('GPU', 0):g}", source=plan.source, field="num_gpus",
                             valid="a cluster with enough GPUs (logical ones on CPU: ray start --num-gpus N)")
        if resources.get(routing_resource(group.gpu_type), 0) <= 0:
            present = sorted(k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:"))
            raise InputError(f"no node of the Ray cluster has '{routing_resource(group.gpu_type)}' for group "
                             f"{group.label}", source=plan.source, field="gpu_type",
                             valid="types present: " + (", ".join(present) or "none"))


def run_plan_on_ray(
    plan: LaunchPlan,
    settings: LaunchSettings,
    *,
    address: str | None = None,
    num_cpus: float = 1.0,
    on_progress: Callable[[list[JobStatus]], None] | None = None,
) -> LaunchReport:
    """Submit one task per group, stream progress, wait for all; returns every job's final status."""
    ray = require_ray()
    from ray.exceptions import RayError

    started = False
    if not ray.is_initialized():
        with python_signal_handlers_kept():  # Ray's native handler would turn SIGTERM into a crash dump
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        started = True
    try:
        check_ray(plan)
        board = ray.remote(num_cpus=0)(ProgressBoard).remote()
        # the board is up before any task starts, so the first reports stream instead of queueing
        ray.get(board.__ray_ready__.remote())
        task = ray.remote(run_group_task)
        refs: dict[Any, GpuGroup] = {}
        for group in plan.groups:
            refs[task.options(
                num_gpus=group.gpus_per_node, num_cpus=num_cpus,
                resources={routing_resource(group.gpu_type): ROUTING_FRACTION},
                max_retries=0,  # a training job is not idempotent: a lost group is reported, not rerun
                name=f"{TASK_NAME_PREFIX} {group.slug}",
            ).remote(group, settings, board)] = group
        finals: dict[str, JobStatus] = {}
        interrupted = False
        pending = list(refs)
        try:
            with sigterm_as_interrupt():
                while pending:
                    done, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_INTERVAL_S)
                    for ref in done:
                        group = refs[ref]
                        try:
                            for status in ray.get(ref):
                                finals[status["job"]] = JobStatus(**status)
                        except RayError as exc:  # the worker or node died: the group's jobs are lost
                            reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
                            for job in group.jobs:
                                finals[job.name] = JobStatus(job.name, group.slug, "?", "failed", error=reason)
                    if on_progress:
                        live = {name: JobStatus(**s) for name, s in ray.get(board.snapshot.remote()).items()}
                        live.update(finals)
                        on_progress([live[j.name] for j in plan.jobs if j.name in live])
        except KeyboardInterrupt:
            interrupted = True
            for ref in pending:
                ray.cancel(ref, force=True)
            snapshot = ray.get(board.snapshot.remote())
            for ref in pending:
                for job in refs[ref].jobs:
                    last = snapshot.get(job.name, {})
                    finals[job.name] = JobStatus(job.name, refs[ref].slug, last.get("host", "?"), "stopped",
                                                 int(last.get("step", 0) or 0), last.get("steps"),
                                                 last.get("samples_per_s"), None, last.get("log", ""))
        report = LaunchReport(tuple(finals[j.name] for j in plan.jobs if j.name in finals), interrupted)
        if on_progress:
            on_progress(list(report.jobs))
        return report
    finally:
        if started:
            ray.shutdown()


NAMESPACE = "colocate-serve"
POLL_TIMEOUT_S = 30.0


class GroupHost:
    """The Ray actor of one live group: holds its GPUs, runs its supervisor, reads its files."""

    def __init__(self) -> None:
        self.handle: dict[str, Any] = {}
    def start(self, doc: GroupDoc) -> dict[str, Any]:
        import ray

        from scheduler.executor.supervise import spawn_supervisor

        gpu_ids = ray.get_gpu_ids()
        doc = replace(doc, cuda_visible_devices=",".join(str(g) for g in gpu_ids) if doc.gpu else None)
        doc.group_file.parent.mkdir(parents=True, exist_ok=True)
        self.handle = spawn_supervisor(doc.write(), die_with_parent=True)  # dies with this actor
        return {**self.handle, "node_id": ray.get_runtime_context().get_node_id(), "gpu_ids": list(map(str, gpu_ids))}

    def poll(self, doc: GroupDoc) -> dict[str, Any]:
        from scheduler.executor.supervise import group_files, supervisor_alive

        return {"alive": supervisor_alive(doc, self.handle), "jobs": group_files(doc)}

    def signal(self, doc: GroupDoc, signum: int) -> None:
        from scheduler.executor.supervise import signal_supervisor

        signal_supervisor(doc, self.handle, signum)


class RayExecutor:
    """Groups on a Ray cluster (``address`` None: connect to a running one, else start a local one)."""

    name = "ray"
    runs_here = False

    def __init__(self, address: str | None = None, num_cpus: float = 0.0, instance: str = "default",
                 start_timeout_s: float = 120.0) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.instance = instance
        self.start_timeout_s = start_timeout_s

    def _connect(self) -> Any:
        ray = require_ray()
        if not ray.is_initialized():
            with python_signal_handlers_kept():  # the server's SIGTERM/SIGINT handlers, not Ray's crash dump
                ray.init(address=self.address, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
        return ray

    def check(self, plan: LaunchPlan, settings: LaunchSettings) -> None:
        from scheduler.executor.ray.backend import check_ray

        self._connect()
        check_ray(plan)

    def run(self, plan: LaunchPlan, settings: LaunchSettings,
            on_progress: Callable[[list[JobStatus]], None] | None = None) -> LaunchReport:
        return run_plan_on_ray(plan, settings, address=self.address, num_cpus=self.num_cpus or 1.0,
                               on_progress=on_progress)

    def actor_name(self, key: str) -> str:
        return f"colocate-{self.instance}-{key}"

    def start(self, group: GpuGroup, doc: GroupDoc) -> dict[str, Any]:
        ray = self._connect()
        name = self.actor_name(doc.key)
        actor = ray.remote(GroupHost).options(
            name=name, namespace=NAMESPACE, lifetime="detached", max_restarts=0, num_cpus=self.num_cpus,
            num_gpus=group.gpus_per_node, resources={routing_resource(group.gpu_type): ROUTING_FRACTION},
        ).remote()
        from ray.exceptions import GetTimeoutError

        try:
            info = ray.get(actor.start.remote(doc), timeout=self.start_timeout_s)
        except GetTimeoutError:  # its GPUs are not free (yet): give the slot back, the server requeues the jobs
            ray.kill(actor)
            raise RuntimeError(f"Ray could not place group {doc.key} ({group.gpus_per_node} GPU(s) of type "
                               f"{group.gpu_type}) within {self.start_timeout_s:.0f} s") from None
        return {"actor": name, **info}

    def _actor(self, handle: dict[str, Any]) -> Any | None:
        ray = self._connect()
        try:
            return ray.get_actor(handle["actor"], namespace=NAMESPACE)
        except ValueError:
            return None

    def poll(self, handle: dict[str, Any], doc: GroupDoc) -> GroupPoll | None:
        from ray.exceptions import GetTimeoutError, RayError

        actor = self._actor(handle)
        if actor is None:
            return None
        try:
            answer = self._connect().get(actor.poll.remote(doc), timeout=POLL_TIMEOUT_S)
        except GetTimeoutError:
            return GroupPoll(True, {})  # busy node: no news this round, not a loss
        except RayError:
            return None
        return GroupPoll(bool(answer["alive"]), answer["jobs"])

    def stop(self, handle: dict[str, Any], doc: GroupDoc) -> None:
        actor = self._actor(handle)
        if actor is not None:
            actor.signal.remote(doc, int(signal.SIGTERM))

    def release(self, handle: dict[str, Any], doc: GroupDoc) -> None:
        from ray.exceptions import RayError

        actor = self._actor(handle)
        if actor is None:
            return
        ray = self._connect()
        try:
            ray.get(actor.signal.remote(doc, int(signal.SIGKILL)), timeout=POLL_TIMEOUT_S)
        except RayError:
            pass
        ray.kill(actor)
