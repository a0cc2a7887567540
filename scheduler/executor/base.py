"""The executor protocol: what every backend that runs GPU groups implements (registry: :mod:`.registry`).

Two ways of running a plan share one object:

* **to the end** — ``colocate launch``: :meth:`Executor.check` refuses what the backend can never run, then
  :meth:`Executor.run` starts every group, streams progress and returns the final statuses;
* **live** — ``colocate serve``: :meth:`Executor.start` starts one group *detached* (it must outlive the
  server) from a group document (:func:`scheduler.executor.supervise.supervise` runs it) and returns a
  JSON-able handle the server stores; :meth:`Executor.poll` reports the group's jobs (progress and exit
  files) or None when the group is lost; :meth:`Executor.stop` asks it to stop (its jobs checkpoint);
  :meth:`Executor.release` frees what the group held once it ended (and kills what is left).

Handles survive the server: a restarted server passes a stored handle to :meth:`Executor.poll` and carries on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from common.options import option
from scheduler.executor.command import RunSettings

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.executor.group_doc import GroupDoc
    from scheduler.executor.plan import GpuGroup, LaunchPlan

DEVICES = ("auto", "cpu", "cuda")


def sharing_names() -> tuple[str, ...]:
    """The registered sharing modes (read when asked: the registry imports the profiler's GPU code)."""
    from profiler.gpu.sharing import sharing_mode_names

    return tuple(sharing_mode_names())


@dataclass(frozen=True)
class Runtime:
    """How jobs run wherever groups are started (``launch``, ``serve``): each idea one flag and one help text.
    A config takes a field with ``shared_option(name, default, of=Runtime)`` (its own default)."""

    device: str = option("auto", "What built-in jobs train on.", choices=DEVICES)
    sharing: str = option("timeslice", "How the jobs of a group share its GPUs (a registered sharing mode; "
                                       "launch: unless the allocation says).", choices=sharing_names)
    threads: int = option(1, "CPU threads per built-in job process.")
    grace_s: float = option(10.0, "Seconds a stopped job has after SIGTERM (to checkpoint) before SIGKILL.",
                            flag="--grace")


STATE_RUNNING = "running"
STATE_FINISHED = "finished"
STATE_FAILED = "failed"
STATE_STOPPED = "stopped"


@dataclass(frozen=True)
class LaunchSettings:
    """How the local executor runs and supervises jobs."""

    run: RunSettings = field(default_factory=RunSettings)
    log_dir: Path = Path("launch-logs")
    duration_s: float | None = None  # stop every job after this long (None = until they end or Ctrl-C)
    stop_grace_s: float = 10.0
    python: str = sys.executable


@dataclass(frozen=True)
class JobStatus:
    """One job as the launcher sees it right now."""

    job: str
    group: str
    host: str
    state: str  # running | finished | failed | stopped
    step: int = 0
    steps: int | None = None
    samples_per_s: float | None = None
    exit_code: int | None = None
    log: str = ""
    error: str = ""
    node_id: str = ""  # the Ray node that ran it (Ray executor only)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LaunchReport:
    jobs: tuple[JobStatus, ...]
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.interrupted and all(j.state in (STATE_FINISHED, STATE_STOPPED) for j in self.jobs)


@dataclass(frozen=True)
class GroupPoll:
    """One look at a live group: whether its supervisor runs, and each job's progress and exit records.

    ``ended_by``: set once the group has ended when the backend itself ended it, not the server nor its own jobs
    (Slurm's state and reason: ``Slurm job 17 TIMEOUT (TimeLimit)``, an administrator's ``scancel``); the
    server records its members that had not finished as crashed with this reason.

    ``unstarted``: set while the backend has not started the group yet (Slurm's queue: alive, the why is shown on
    its jobs), and when it gave up before starting it (pending too long, or stopped while pending: not alive);
    the server then requeues its jobs — no crash, no restart."""

    alive: bool
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    ended_by: str | None = None
    unstarted: str | None = None


@runtime_checkable
class Executor(Protocol):
    """A backend that runs GPU groups (one job alone, or a packed pair on the same GPUs)."""

    name: str
    runs_here: bool  # True: groups run on this node (``colocate launch --node`` picks which of the plan's nodes)

    def check(self, plan: "LaunchPlan", settings: "LaunchSettings") -> None:
        """Raise InputError for groups this backend can never run (before anything starts)."""
        ...

    def run(self, plan: "LaunchPlan", settings: "LaunchSettings",
            on_progress: "Callable[[list[JobStatus]], None] | None" = None) -> "LaunchReport":
        """Run every group to its end (or until interrupted); the final status of every job."""
        ...

    def start(self, group: "GpuGroup", doc: "GroupDoc") -> dict[str, Any]:
        """Start ``group`` detached from its group document; returns the handle to store."""
        ...

    def poll(self, handle: dict[str, Any], doc: "GroupDoc") -> GroupPoll | None:
        """The group's state now; None when it is lost (its node or runner died)."""
        ...

    def stop(self, handle: dict[str, Any], doc: "GroupDoc") -> None:
        """Ask the group's jobs to stop (SIGTERM: they checkpoint and exit); returns at once."""
        ...

    def release(self, handle: dict[str, Any], doc: "GroupDoc") -> None:
        """Free the group's resources after it ended, killing whatever is left of it."""
        ...
