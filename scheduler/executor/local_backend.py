"""The local backend behind the executor protocol: this node's GPUs (or CPU), plain processes.

``run`` is :func:`scheduler.executor.local.run_groups` (``colocate launch``); the live methods start one
detached supervisor process per group (:mod:`scheduler.executor.supervise`) and find it again by pid and
start time, so a group outlives the server that started it.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scheduler.executor.base import GroupPoll
from scheduler.executor.local import JobStatus, LaunchReport, LaunchSettings, check_local, run_groups
from scheduler.executor.plan import GpuGroup, LaunchPlan
from scheduler.executor.supervise import group_files, signal_supervisor, spawn_supervisor, supervisor_alive


class LocalExecutor:
    """One node: groups run as processes here (``CUDA_VISIBLE_DEVICES`` = the group's GPUs unless on CPU)."""

    name = "local"
    runs_here = True

    def check(self, plan: LaunchPlan, settings: LaunchSettings) -> None:
        check_local(plan, settings)

    def run(self, plan: LaunchPlan, settings: LaunchSettings,
            on_progress: Callable[[list[JobStatus]], None] | None = None) -> LaunchReport:
        return run_groups(plan.groups, settings, on_progress=on_progress)

    def start(self, group: GpuGroup, doc: dict[str, Any]) -> dict[str, Any]:
        from scheduler.executor.local import physical_gpus

        if doc.get("gpu"):
            doc = {**doc, "cuda_visible_devices": ",".join(physical_gpus(group))}
        group_file = Path(doc["pid_file"]).with_suffix(".json")
        group_file.write_text(json.dumps(doc))
        return spawn_supervisor(group_file)

    def poll(self, handle: dict[str, Any], doc: dict[str, Any]) -> GroupPoll | None:
        return GroupPoll(supervisor_alive(doc, handle), group_files(doc))

    def stop(self, handle: dict[str, Any], doc: dict[str, Any]) -> None:
        signal_supervisor(doc, handle, signal.SIGTERM)

    def release(self, handle: dict[str, Any], doc: dict[str, Any]) -> None:
        signal_supervisor(doc, handle, signal.SIGKILL)  # its jobs die with it (PR_SET_PDEATHSIG)
