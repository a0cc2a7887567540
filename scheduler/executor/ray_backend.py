"""The Ray backend behind the executor protocol: whole-GPU groups routed by ``accelerator_type``.

``run`` is :func:`scheduler.executor.ray_exec.run_plan_on_ray` (``colocate launch --backend ray``). Live
(``colocate serve``), a group is a *detached* named actor (:class:`GroupHost`, namespace
:data:`NAMESPACE`) that asks for the group's GPUs (whole GPUs: the scheduler, not Ray, picks partners)
and a sliver of ``accelerator_type:<TYPE>``; it starts the group's supervisor on its node with the GPUs Ray
assigned, and answers polls from that node's files. Detached actors outlive the driver: after ``kill -9``
of the server the restarted one finds each group's actor again by name. ``release`` kills the actor, which
returns its GPUs to Ray.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profiler.campaign.ray_backend import ROUTING_FRACTION, require_ray, routing_resource
from scheduler.executor.base import GroupPoll
from scheduler.executor.local import JobStatus, LaunchReport, LaunchSettings
from scheduler.executor.plan import GpuGroup, LaunchPlan

NAMESPACE = "colocate-serve"
POLL_TIMEOUT_S = 30.0


class GroupHost:
    """The Ray actor of one live group: holds its GPUs, runs its supervisor, reads its files."""

    def __init__(self) -> None:
        self.handle: dict[str, Any] = {}
        self.doc: dict[str, Any] = {}

    def start(self, doc: dict[str, Any]) -> dict[str, Any]:
        import ray

        from scheduler.executor.supervise import spawn_supervisor

        gpu_ids = ray.get_gpu_ids()
        self.doc = {**doc, "cuda_visible_devices": ",".join(str(g) for g in gpu_ids) if doc.get("gpu") else None}
        group_file = Path(doc["pid_file"]).with_suffix(".json")
        group_file.parent.mkdir(parents=True, exist_ok=True)
        group_file.write_text(json.dumps(self.doc))
        self.handle = spawn_supervisor(group_file)
        return {**self.handle, "node_id": ray.get_runtime_context().get_node_id(), "gpu_ids": list(map(str, gpu_ids))}

    def poll(self, doc: dict[str, Any]) -> dict[str, Any]:
        from scheduler.executor.supervise import group_files, supervisor_alive

        return {"alive": supervisor_alive(doc, self.handle), "jobs": group_files(doc)}

    def signal(self, doc: dict[str, Any], signum: int) -> None:
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
            ray.init(address=self.address, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        return ray

    def check(self, plan: LaunchPlan, settings: LaunchSettings) -> None:
        from scheduler.executor.ray_exec import check_ray

        self._connect()
        check_ray(plan)

    def run(self, plan: LaunchPlan, settings: LaunchSettings,
            on_progress: Callable[[list[JobStatus]], None] | None = None) -> LaunchReport:
        from scheduler.executor.ray_exec import run_plan_on_ray

        return run_plan_on_ray(plan, settings, address=self.address, num_cpus=self.num_cpus or 1.0,
                               on_progress=on_progress)

    def actor_name(self, key: str) -> str:
        return f"colocate-{self.instance}-{key}"

    def start(self, group: GpuGroup, doc: dict[str, Any]) -> dict[str, Any]:
        ray = self._connect()
        name = self.actor_name(doc["key"])
        actor = ray.remote(GroupHost).options(
            name=name, namespace=NAMESPACE, lifetime="detached", max_restarts=0, num_cpus=self.num_cpus,
            num_gpus=group.gpus_per_node, resources={routing_resource(group.gpu_type): ROUTING_FRACTION},
        ).remote()
        from ray.exceptions import GetTimeoutError

        try:
            info = ray.get(actor.start.remote(doc), timeout=self.start_timeout_s)
        except GetTimeoutError:  # its GPUs are not free (yet): give the slot back, the server requeues the jobs
            ray.kill(actor)
            raise RuntimeError(f"Ray could not place group {doc['key']} ({group.gpus_per_node} GPU(s) of type "
                               f"{group.gpu_type}) within {self.start_timeout_s:.0f} s") from None
        return {"actor": name, **info}

    def _actor(self, handle: dict[str, Any]) -> Any | None:
        ray = self._connect()
        try:
            return ray.get_actor(handle["actor"], namespace=NAMESPACE)
        except ValueError:
            return None

    def poll(self, handle: dict[str, Any], doc: dict[str, Any]) -> GroupPoll | None:
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

    def stop(self, handle: dict[str, Any], doc: dict[str, Any]) -> None:
        actor = self._actor(handle)
        if actor is not None:
            actor.signal.remote(doc, int(signal.SIGTERM))

    def release(self, handle: dict[str, Any], doc: dict[str, Any]) -> None:
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
