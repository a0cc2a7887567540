"""Run GPU groups on this node: one process per job, MPS per GPU group when asked, logs and progress per job.

Each job runs in its own session (process group) under a reaper (:mod:`common.contain`, as ``colocate serve``'s
jobs do): a launcher that dies takes its jobs with it (``PR_SET_PDEATHSIG``), and what a job starts outside its
process group (a ``setsid`` child) is held in the job's cgroup, or the reaper's subreaper tree, and killed with it.
Teardown — at the end, after ``--duration``, on Ctrl-C or SIGTERM — sends SIGTERM to every job's process group,
waits ``stop_grace_s``, then kills what is left (cgroup, reaper's tree, process group), and only then quits the MPS
daemons (a daemon must outlive its clients). The MPS daemon of a group is private to it
(:func:`profiler.gpu.mps.mps_daemon`: own pipe and log directories, only our daemon is ever stopped).

Progress comes from each job's progress file (the built-in trainer writes it; user commands may write the
same JSON to ``$COLOCATE_PROGRESS_FILE``), read as untrusted input (:mod:`.job_files`: a bad file reads as none).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from common.contain import kill_cgroup, make_cgroup, remove_cgroup
from common.errors import InputError
from common.names import safe_name
from common.signals import sigterm_as_interrupt
from profiler.gpu.sharing import sharing_mode
from scheduler.executor.base import (
    STATE_FAILED,
    STATE_FINISHED,
    STATE_RUNNING,
    STATE_STOPPED,
    GroupPoll,
    JobStatus,
    LaunchReport,
    LaunchSettings,
)
from scheduler.executor.command import job_argv
from scheduler.executor.group_doc import GroupDoc
from scheduler.executor.job_files import last_line, read_progress
from scheduler.executor.plan import GpuGroup, JobLaunch, LaunchPlan, job_environment
from scheduler.executor.supervise import (
    KILL_WAIT_S,
    group_files,
    signal_supervisor,
    spawn_supervisor,
    supervisor_alive,
)

POLL_INTERVAL_S = 0.25

@dataclass
class _Process:
    job: JobLaunch
    group: GpuGroup
    popen: subprocess.Popen[bytes]
    log_path: Path
    progress_path: Path
    log_handle: IO[bytes]
    cgroup: Path | None = None
    stopped: bool = False  # we asked it to stop (duration reached, Ctrl-C)


def check_local(plan: LaunchPlan, settings: LaunchSettings) -> None:
    """Refuse what this node cannot run before anything starts."""
    for group in plan.groups:
        group.require_single_node(plan.source, "here")
        mode = sharing_mode(group.sharing)
        reason = mode.unavailable_reason("cpu" if settings.run.device == "cpu" else "cuda")
        if reason is None:
            continue
        if settings.run.device == "cpu":
            raise InputError(f"group {group.label} asks for {mode.label} but --device is cpu", source=plan.source,
                             field="sharing", valid="timeslice on CPU (--sharing timeslice)")
        raise InputError(f"group {group.label} asks for {mode.label}: {reason}", source=plan.source,
                         field="sharing", valid=f"timeslice (--sharing timeslice), or a node with {mode.label}")


def physical_gpus(group: GpuGroup) -> list[str]:
    """CUDA_VISIBLE_DEVICES entries for a group's GPU indices on this node (honouring an existing mask)."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible:
        return [str(g) for g in group.gpus]
    missing = [g for g in group.gpus if g >= len(visible)]
    if missing:
        raise InputError(f"group {group.label} wants GPU {missing[0]} but CUDA_VISIBLE_DEVICES has {len(visible)}",
                         field="gpus", valid=f"GPU indices below {len(visible)} on this node")
    return [visible[g] for g in group.gpus]


def _start_job(job: JobLaunch, group: GpuGroup, settings: LaunchSettings, env: Mapping[str, str]) -> _Process:
    stem = f"{group.key}-{safe_name(job.name)}"
    log_path = settings.log_dir / f"{stem}.log"
    progress_path = settings.log_dir / f"{stem}.progress.json"
    progress_path.unlink(missing_ok=True)
    argv = job_argv(job, settings.run, python=settings.python, progress_file=str(progress_path))
    full_env = {**env, **job_environment(job, group), "COLOCATE_PROGRESS_FILE": str(progress_path),
                "PYTHONUNBUFFERED": "1"}
    handle = open(log_path, "ab")
    handle.write(f"# colocate launch: {job.name} on {group.where} ({group.sharing}); argv: {argv}\n".encode())
    handle.flush()
    cgroup = make_cgroup(f"launch-{os.getpid()}-{stem}")
    contained = ["--cgroup", str(cgroup)] if cgroup is not None else []
    popen = subprocess.Popen([sys.executable, "-m", "common.contain", str(os.getpid()), *contained, "--", *argv],
                             stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env,
                             start_new_session=True)
    return _Process(job, group, popen, log_path, progress_path, handle, cgroup=cgroup)


def _status(process: _Process, host: str) -> JobStatus:
    progress = read_progress(process.progress_path) or {}
    code = process.popen.poll()
    if code is None:
        state = STATE_RUNNING
    elif process.stopped:
        state = STATE_STOPPED if progress.get("state") != STATE_FINISHED else STATE_FINISHED
    else:
        state = STATE_FINISHED if code == 0 else STATE_FAILED
    error = last_line(process.log_path) if state == STATE_FAILED else ""
    if state == STATE_FAILED and code is not None and code < 0:
        error = f"killed by signal {-code}; {error}"
    return JobStatus(process.job.name, process.group.slug, host, state, int(progress.get("step", 0) or 0),
                     progress.get("steps"), progress.get("samples_per_s"), code, str(process.log_path), error)


def _signal_group(process: _Process, signum: int) -> None:
    try:
        os.killpg(process.popen.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_reaper(process: _Process) -> None:
    try:
        os.kill(process.popen.pid, signal.SIGUSR1)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(processes: Sequence[_Process], grace_s: float) -> None:
    """SIGTERM every job's process group, wait, SIGKILL the rest; always reaps every child."""
    for process in processes:
        if process.popen.poll() is None:
            process.stopped = True
            _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in processes:
        try:
            process.popen.wait(timeout=max(deadline - time.monotonic(), 0.05))
        except subprocess.TimeoutExpired:
            pass
    for process in processes:
        kill_cgroup(process.cgroup)  # what the job started, in its session or not
        if process.popen.poll() is None:  # its reaper kills its tree and group, itself last
            _signal_reaper(process)
        try:
            process.popen.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.popen.wait()
        remove_cgroup(process.cgroup)
        process.log_handle.close()


def run_groups(
    groups: Sequence[GpuGroup],
    settings: LaunchSettings,
    *,
    gpu_assignment: Callable[[GpuGroup], list[str]] = physical_gpus,
    on_progress: Callable[[list[JobStatus]], None] | None = None,
) -> LaunchReport:
    """Start ``groups`` on this node and supervise them until every job ends (or the duration is over).

    ``gpu_assignment`` maps a group to its CUDA_VISIBLE_DEVICES entries (the Ray executor passes the GPUs
    Ray assigned). Ctrl-C/SIGTERM stop everything cleanly and return a report with ``interrupted`` set.
    """
    settings.log_dir.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    processes: list[_Process] = []
    interrupted = False
    with ExitStack() as daemons:
        try:
            with sigterm_as_interrupt():
                for group in groups:
                    env = dict(os.environ)
                    if settings.run.device != "cpu":
                        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_assignment(group))
                    mode = sharing_mode(group.sharing)
                    env.update(mode.enter(daemons, env.get("CUDA_VISIBLE_DEVICES"), None))
                    for job in group.jobs:  # a client of the group's mode (MPS: no CUDA_VISIBLE_DEVICES of its own)
                        processes.append(_start_job(job, group, settings, mode.client_environment(env)))
                deadline = time.monotonic() + settings.duration_s if settings.duration_s else None
                while any(p.popen.poll() is None for p in processes):
                    if on_progress:
                        on_progress([_status(p, host) for p in processes])
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                    time.sleep(POLL_INTERVAL_S)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            _stop(processes, settings.stop_grace_s)  # before the daemons quit (ExitStack unwinds after this)
    report = LaunchReport(tuple(_status(p, host) for p in processes), interrupted)
    if on_progress:
        on_progress(list(report.jobs))
    return report


class LocalExecutor:
    """One node: groups run as processes here (``CUDA_VISIBLE_DEVICES`` = the group's GPUs unless on CPU)."""

    name = "local"
    runs_here = True

    def check(self, plan: LaunchPlan, settings: LaunchSettings) -> None:
        check_local(plan, settings)

    def run(self, plan: LaunchPlan, settings: LaunchSettings,
            on_progress: Callable[[list[JobStatus]], None] | None = None) -> LaunchReport:
        return run_groups(plan.groups, settings, on_progress=on_progress)

    def start(self, group: GpuGroup, doc: GroupDoc) -> dict[str, Any]:
        if doc.gpu:
            doc = replace(doc, cuda_visible_devices=",".join(physical_gpus(group)))
        return spawn_supervisor(doc.write())  # made anew, 0600: its jobs' commands and environments are theirs

    def poll(self, handle: dict[str, Any], doc: GroupDoc) -> GroupPoll | None:
        return GroupPoll(supervisor_alive(doc, handle), group_files(doc))

    def stop(self, handle: dict[str, Any], doc: GroupDoc) -> None:
        signal_supervisor(doc, handle, signal.SIGTERM)

    def release(self, handle: dict[str, Any], doc: GroupDoc) -> None:
        signal_supervisor(doc, handle, signal.SIGKILL)  # its jobs die with it (their reapers, their cgroups)
