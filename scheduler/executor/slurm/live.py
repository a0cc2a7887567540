"""Slurm as a live backend of ``colocate serve``: one Slurm job per GPU group, state read back from Slurm.

**Start.** A group becomes one batch job (:func:`group_script`): one node, one task, the group's GPUs as GRES
of its type (:mod:`.settings` maps the cluster file's GPU types to partitions, GRES types and
constraints). The script sets up the group's sharing mode with the mode's own ``slurm_setup`` lines (MPS: a
private control daemon, 0700 pipe and log directories) and quits it with ``slurm_teardown`` after the jobs,
and runs the group's supervisor (:mod:`.supervise`: every job in its own session, exit records, stop files,
generation fencing) in between. Slurm picks the node and the GPUs (it sets ``CUDA_VISIBLE_DEVICES``): the
allocation's indices are advisory, as on Ray. :meth:`SlurmExecutor.start` submits and returns (a round never
waits for Slurm); while the job is pending, polls say so (:attr:`GroupPoll.unstarted`: Slurm's reason, shown on
its jobs), and one still pending after ``start_timeout_s`` is cancelled there and its jobs requeued, no crash.
A group stopped while pending is cancelled in the queue (there is no batch shell to signal yet).
:func:`check_controller` is ``serve``'s start-up check that the controller answers at all.

**State** comes from Slurm: ``squeue`` (one call for all groups per poll cycle), and for a job that left the
queue ``sacct`` where accounting runs, else ``scontrol show job``; a controller that does not answer is no
news (alive), a job it has forgotten is lost. The job is alive until Slurm says it ended;
the jobs' progress and exit records are read from their directories (the state directory must be on a file
system the nodes share, as must the Python environment).

**Stop** = ``scancel --batch --signal=TERM``: the batch shell passes SIGTERM to the supervisor, which passes it
to every job (checkpoint, exit) and kills what is left after the grace; the job then ends COMPLETED.
**Release** = ``scancel``. A group Slurm ends itself — its time limit, an administrator's ``scancel``, a node
failure — ends in another state (TIMEOUT, CANCELLED, NODE_FAIL, ...): :attr:`GroupPoll.ended_by` carries
Slurm's state and reason, and the server records its unfinished jobs as crashed with it. Exit records of
jobs stopped that way are held back while the job is still ending, so the reason is Slurm's, not "stopped".

**Owners.** A group whose jobs run as their owner (``colocate serve --users multi`` as root) is submitted with
``sbatch --uid/--gid`` of that owner (Slurm 22.05 as Debian ships it: root may submit as another user), so Slurm's
accounting, limits and ``squeue -u`` see the owner, and the batch script, supervisor and jobs all run as the owner
(:func:`owner_submission`). A batch job has one uid: a group of several owners is refused (the round never plans
one on Slurm: :func:`scheduler.model.owners.sharing_across_owners`). The owner gets the group file, an empty output
file (Slurm opens it as the owner) and its jobs' directories (0700); the job starts in its first job's directory.

**Re-adoption.** The handle the server stores is the Slurm job id; every job is named
``colocate-<instance>-<group>``, so a server killed between ``sbatch`` and storing the id finds it by name.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from common.errors import InputError
from common.owners import Owner, give_to
from profiler.gpu.sharing import sharing_mode
from scheduler.executor.base import GroupPoll, JobStatus, LaunchReport, LaunchSettings
from scheduler.executor.group_doc import GroupDoc
from scheduler.executor.job_files import last_line
from scheduler.executor.plan import GpuGroup, LaunchPlan
from scheduler.executor.slurm.settings import SlurmSettings, sbatch_options
from scheduler.executor.supervise import STOP_FILE, group_files, prepare_jobs

ENDED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
         "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED")
QUERY_CACHE_S = 1.0
COMMAND_TIMEOUT_S = 60.0
PING_TIMEOUT_S = 20.0  # serve's start-up check that the controller answers (it tries each controller in turn)
UNREACHABLE = "UNREACHABLE"  # our state for a job Slurm could not be asked about just now (alive, no news)
STOP_MARK = ".stop-requested"  # beside the group's pid file: the server asked this group to stop


@dataclass(frozen=True)
class SlurmJob:
    """What Slurm says about one job: its id, state (``RUNNING``, ``TIMEOUT``, ...), reason and exit code."""

    job_id: str
    state: str
    reason: str = ""
    exit_code: str = ""

    @property
    def ended(self) -> bool:
        return self.state in ENDED


def group_script(doc: GroupDoc, python: str) -> str:
    """The batch script of one group: the sharing mode's set-up, the supervisor, the mode's tear-down."""
    mode = sharing_mode(doc.sharing)
    return "\n".join([
        "#!/bin/bash",
        f"# colocate serve --backend slurm: GPU group {doc.key} ({', '.join(doc.names)})",
        "set -uo pipefail",
        'SUPERVISOR=""', 'STOP=""', 'MPS_ROOT=""', 'MPS_STARTED=""',
        "cleanup() {",
        "  trap - EXIT INT TERM",
        '  if [[ -n "$SUPERVISOR" ]]; then kill -TERM "$SUPERVISOR" 2>/dev/null; wait "$SUPERVISOR"; fi',
        *mode.slurm_teardown,
        "}",
        "trap cleanup EXIT",
        # SIGTERM (the server's stop) goes to the supervisor, which stops the jobs within the grace; the shell
        # keeps waiting for it, so the job ends with the supervisor's status: 0, or the first failed job's
        """trap 'STOP=1; [[ -n "$SUPERVISOR" ]] && kill -TERM "$SUPERVISOR" 2>/dev/null' TERM INT""",
        *mode.slurm_setup,
        '[[ -n "$STOP" ]] && exit 0',
        f"{shlex.quote(python)} -m scheduler.executor.supervise {shlex.quote(str(doc.group_file))} &",
        "SUPERVISOR=$!",
        # wait at least once: a supervisor that ended already (it could not start) still gives its status
        'wait "$SUPERVISOR"; status=$?',
        'while kill -0 "$SUPERVISOR" 2>/dev/null; do wait "$SUPERVISOR"; status=$?; done',
        'SUPERVISOR=""',
        'exit "$status"',
        "",
    ])


class SlurmExecutor:
    """Groups as Slurm jobs; ``run`` (``colocate launch``) is not offered: ``--emit slurm`` writes the scripts."""

    name = "slurm"
    runs_here = False

    def __init__(self, settings: SlurmSettings, instance: str = "default", python: str = sys.executable) -> None:
        self.settings = settings
        self.instance = instance
        self.python = python  # the supervisor's interpreter on the nodes (a shared environment)
        self._runner = _run
        self._queue: tuple[float, dict[str, SlurmJob] | None] = (0.0, {})
        self._first_seen: dict[str, float] = {}  # pending jobs of handles without their submission time

    # -- launch ----------------------------------------------------------------------------------------------
    def check(self, plan: LaunchPlan, settings: LaunchSettings) -> None:
        raise InputError("the slurm backend runs colocate serve's groups", field="backend",
                         valid="colocate launch ... --emit slurm DIR, then DIR/submit_all.sh")

    def run(self, plan: LaunchPlan, settings: LaunchSettings,
            on_progress: Callable[[list[JobStatus]], None] | None = None) -> LaunchReport:
        self.check(plan, settings)  # always refuses: colocate launch does not offer this backend
        return LaunchReport(())

    # -- live ------------------------------------------------------------------------------------------------
    def job_name(self, key: str) -> str:
        return f"colocate-{self.instance}-{key}"

    def start(self, group: GpuGroup, doc: GroupDoc) -> dict[str, Any]:
        group.require_single_node("colocate serve", "on Slurm")
        group_file = doc.group_file
        script = group_file.with_suffix(".sbatch")
        output = group_file.with_suffix(".slurm.out")
        owner, as_owner = owner_submission(doc)
        replace(as_owner, cuda_visible_devices=None, sharing_ready=True).write(group_file)
        script.write_text(group_script(doc, self.python))
        _stop_mark(doc).unlink(missing_ok=True)
        prepare_jobs(doc)
        submit_as: list[str] = []
        if owner is not None:
            output.touch()
            for path in (group_file, output):
                give_to(path, owner, 0o600)
            submit_as = [f"--uid={owner.uid}", f"--gid={owner.gid}", f"--chdir={doc.jobs[0].dir}"]
        name = self.job_name(doc.key)
        options = sbatch_options(group.gpu_type, group.gpus_per_node, len(group.jobs), self.settings, job_name=name,
                                 output=output)
        done = self._runner(["sbatch", "--parsable", *submit_as, *options, str(script)])
        if done.returncode != 0:
            raise RuntimeError(f"sbatch refused group {doc.key}: {_first_line(done.stderr)}")
        self._queue = (0.0, {})  # the next query asks squeue again: the new job is in it
        # submitted, not started: later polls say whether it runs (the round does not wait for Slurm)
        return {"job_id": done.stdout.strip().split(";")[0], "name": name, "submitted_at": time.time()}

    def poll(self, handle: dict[str, Any], doc: GroupDoc) -> GroupPoll | None:
        job_id = handle.get("job_id") or self._find(doc.key)
        if job_id is None:
            return None  # never submitted (the server died before sbatch), or unknown to Slurm
        job = self.query(job_id)
        if job is None:
            return None
        if job.state == "PENDING" or (job.ended and _stopped_pending(doc)):
            return self._unstarted(job, handle, doc)
        files = group_files(doc)
        asked = _stop_mark(doc).exists()
        if not job.ended and not asked:  # a job stopped by Slurm, not by us: its end waits for Slurm's account
            for name, record in files.items():
                ended = record.get("exit")
                if ended and ended.get("stop_requested") and not _stopped_alone(doc, name):
                    record["exit"] = None
        ended_by = None
        if job.ended and job.state != "COMPLETED" and not asked:
            ended_by = f"Slurm job {job.job_id} {self._detail(job)}"
            output = last_line(doc.group_file.with_suffix(".slurm.out"))
            if job.state == "FAILED" and output:  # the batch script itself failed: what it said last
                ended_by += f": {output}"
        return GroupPoll(not job.ended, files, ended_by)

    def _unstarted(self, job: SlurmJob, handle: dict[str, Any], doc: GroupDoc) -> GroupPoll:
        """A job Slurm has not started: alive while it waits in the queue; cancelled once it waited longer than
        ``start_timeout_s`` (or ended after the server stopped it there): then not alive, its jobs requeued."""
        if job.ended:
            return GroupPoll(False, unstarted=f"Slurm job {job.job_id} stopped before it started")
        waited = time.time() - float(handle.get("submitted_at") or self._first_seen.setdefault(job.job_id, time.time()))
        why = f"Slurm job {job.job_id} pending ({job.reason if job.reason not in ('', 'None') else 'not scheduled yet'})"
        if waited <= self.settings.start_timeout_s:
            return GroupPoll(True, unstarted=f"{why} for {waited:.0f} s (requeued after "
                                             f"{self.settings.start_timeout_s:.0f} s)")
        self._runner(["scancel", job.job_id])
        return GroupPoll(False, unstarted=f"{why}: not started within {self.settings.start_timeout_s:.0f} s, cancelled")

    def stop(self, handle: dict[str, Any], doc: GroupDoc) -> None:
        job_id = handle.get("job_id") or self._find(doc.key)
        job = self.query(job_id, fresh=True) if job_id is not None else None
        pending = job is not None and job.state == "PENDING"  # no batch shell to signal: cancelled in the queue
        _stop_mark(doc).write_text("pending" if pending else "")
        if job_id is not None:
            self._runner(["scancel", job_id] if pending else ["scancel", "--batch", "--signal=TERM", job_id])

    def release(self, handle: dict[str, Any], doc: GroupDoc) -> None:
        """``scancel`` what is left — unless every job has its exit record: then the supervisor is done and the
        batch script is tearing down (the MPS daemon quits after its clients), and ends by itself."""
        job_id = handle.get("job_id") or self._find(doc.key)
        if job_id is None or all(files.get("exit") for files in group_files(doc).values()):
            return
        job = self.query(job_id, fresh=True)
        if job is not None and not job.ended:
            _stop_mark(doc).touch()
            self._runner(["scancel", job_id])

    # -- what Slurm says -------------------------------------------------------------------------------------
    def query(self, job_id: str, fresh: bool = False) -> SlurmJob | None:
        """The job as Slurm knows it now (None when it knows nothing of it)."""
        when, queue = self._queue
        if fresh or time.monotonic() - when > QUERY_CACHE_S:
            queue = self._squeue()
            self._queue = (time.monotonic(), queue)
        if queue is None:  # the controller did not answer (busy, restarting): no news, not a loss
            return SlurmJob(job_id, UNREACHABLE)
        if job_id in queue:
            return queue[job_id]
        return self._accounted(job_id)

    def _squeue(self) -> dict[str, SlurmJob] | None:
        """This user's jobs in every state Slurm still shows (ended ones for MinJobAge), one call for all;
        None when squeue failed."""
        done = self._runner(["squeue", *_whose(), "-h", "-t", "all", "-o", "%i|%T|%r|%j"])
        if done.returncode != 0:
            return None
        jobs = {}
        for line in done.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4 and parts[3].startswith(f"colocate-{self.instance}-"):
                jobs[parts[0]] = SlurmJob(parts[0], parts[1].split()[0], parts[2])
        return jobs

    def _accounted(self, job_id: str) -> SlurmJob | None:
        """A job that left squeue: from accounting (sacct), else from the controller (scontrol), else None."""
        done = self._runner(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,Reason,ExitCode"])
        for line in done.stdout.splitlines() if done.returncode == 0 else []:
            parts = line.strip().split("|")
            if len(parts) == 4 and parts[0] == job_id:
                return SlurmJob(job_id, parts[1].split()[0], parts[2], parts[3])
        done = self._runner(["scontrol", "show", "job", "-o", job_id])
        if done.returncode != 0:  # a job the controller has forgotten is gone; any other failure is no news
            return None if "Invalid job id" in done.stderr else SlurmJob(job_id, UNREACHABLE)
        fields = _fields(done.stdout)
        return SlurmJob(job_id, fields.get("JobState", UNREACHABLE), fields.get("Reason", ""), fields.get("ExitCode", ""))

    def _scontrol(self, job_id: str) -> dict[str, str]:
        done = self._runner(["scontrol", "show", "job", "-o", job_id])
        return _fields(done.stdout) if done.returncode == 0 else {}

    def _detail(self, job: SlurmJob) -> str:
        """``TIMEOUT (TimeLimit)``, ``CANCELLED``, ``FAILED (exit code 3:0)``: the state and what explains it."""
        if not job.exit_code:
            fields = self._scontrol(job.job_id)
            job = SlurmJob(job.job_id, job.state, fields.get("Reason", job.reason), fields.get("ExitCode", ""))
        notes = [job.reason] if job.reason and job.reason != "None" else []
        if job.state in ("FAILED", "OUT_OF_MEMORY") and job.exit_code:
            notes.append(f"exit code {job.exit_code}")
        return f"{job.state} ({', '.join(notes)})" if notes else job.state

    def _find(self, key: str) -> str | None:
        """The newest job named after group ``key`` (the server died before it stored the id)."""
        done = self._runner(["squeue", *_whose(), "-h", "-t", "all", "-n", self.job_name(key), "-o", "%i"])
        ids = sorted((line.strip() for line in done.stdout.splitlines() if line.strip().isdigit()), key=int)
        return ids[-1] if done.returncode == 0 and ids else None


def owner_submission(doc: GroupDoc) -> tuple[Owner | None, GroupDoc]:
    """The one owner a group's batch job runs as (None: the server's user) and the group document its supervisor
    reads: already that user, it switches no one (no ``owner`` per job) and gives each job its owner's HOME/USER."""
    owners = {job.owner for job in doc.jobs}
    if len(owners) > 1:
        raise RuntimeError(f"group {doc.key} has jobs of {len(owners)} owners: a Slurm job runs as one user")
    owner = doc.jobs[0].owner
    if owner is None:
        return None, doc
    jobs = tuple(replace(job, owner=None, env={**job.env, **owner.environment()}) for job in doc.jobs)
    return owner, replace(doc, jobs=jobs, pid_record=False)


def _fields(text: str) -> dict[str, str]:
    """``scontrol show job -o``'s ``Key=Value`` words."""
    return dict(word.split("=", 1) for word in text.split() if "=" in word)


def _whose() -> list[str]:
    """Whose jobs ``squeue`` lists: this user's; root's server submits as each owner, so everyone's (the instance
    name in every job's name keeps another server's jobs apart)."""
    return [] if os.getuid() == 0 else ["--me"]


def _stop_mark(doc: GroupDoc) -> Path:
    return Path(doc.pid_file).with_suffix(STOP_MARK)


def _stopped_pending(doc: GroupDoc) -> bool:
    """Whether the server stopped this group while Slurm still had it pending, and none of its jobs ever ran."""
    try:
        mark = _stop_mark(doc).read_text()
    except OSError:
        return False
    return mark == "pending" and not any(f.get("progress") or f.get("exit") for f in group_files(doc).values())


def _stopped_alone(doc: GroupDoc, name: str) -> bool:
    """Whether the server stopped this one job of the group (a cancelled member: its stop file)."""
    return (doc.member(name).path / STOP_FILE).exists()


def _first_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else "no message"


def check_controller(timeout_s: float = PING_TIMEOUT_S) -> None:
    """Refuse (one line) unless Slurm's controller answers ``scontrol ping``: without it every ``sbatch`` fails."""
    done = _run(["scontrol", "ping"], timeout_s)
    if done.returncode != 0 and " is UP" not in done.stdout:  # exit 0: a controller (primary or backup) is up
        said = _first_line(f"{done.stdout}\n{done.stderr}")
        raise InputError(f"Slurm's controller does not answer: {said}",
                         field="backend", valid="a machine whose Slurm commands reach slurmctld (scontrol ping "
                                                  "says UP; SLURM_CONF names its slurm.conf)")


def _run(argv: list[str], timeout_s: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: {err}")
