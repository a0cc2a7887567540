"""The supervisor of one GPU group in ``colocate serve``: ``python -m scheduler.executor.supervise GROUP.json``.

The server (local backend) or a Ray actor (Ray backend) starts one supervisor per GPU group, in its own
session and without a parent-death signal, so the group outlives the server: ``kill -9`` of ``colocate serve``
leaves it training, and the restarted server re-adopts it by pid and start time (:func:`process_alive`).

The supervisor starts a private MPS daemon when the group shares by MPS (:func:`profiler.gpu.mps.mps_daemon`),
starts every job of the group (each in its own session under a reaper, :mod:`common.contain`: with
``PR_SET_PDEATHSIG`` jobs never outlive their supervisor, and what a job starts — a ``setsid`` child included, held
in the job's own cgroup v2 where the hierarchy is writable, else in the reaper's subreaper tree — never outlives
the job), waits for them, and writes each job's ``exit.json`` (return code, whether it was asked to
stop, its last log line) when it ends. SIGTERM or SIGINT to the supervisor is the stop request: it is passed
to every job's process group; after ``grace_s`` what is left is killed; the MPS daemon quits last. A
``stop`` file in one job's directory (:func:`request_job_stop`) stops that job alone the same way (a cancelled
member of a pair): the others run on.

Exactly once, whatever dies: every start of a job is a new *generation* (the group key, unique per
start). :func:`spawn_supervisor` writes it to the job's ``generation`` file before the new supervisor
starts; a supervisor that finds another generation there — a stale copy whose server or actor lost track
of it — kills its copy of the job at once and writes no ``exit.json``; and ``exit.json`` carries its
generation, so a late one of an old copy is never read as the new copy's end (:func:`group_files`).
``pid_record`` false (a Slurm job run as its owner, who cannot write the server's ``runs/``) writes no pid file.
Started from a Ray actor (``die_with_parent``), the supervisor also gets ``PR_SET_PDEATHSIG``: it dies with
its actor, and its jobs with it.

``GROUP.json``: a :class:`~scheduler.executor.group_doc.GroupDoc` (its fields and their JSON keys are documented
there; a damaged one is refused in one line, exit 2). ``sharing_ready`` says the sharing mode is set up already
(the Slurm backend's batch script runs the mode's ``slurm_setup``); a job's ``dir`` holds ``train.log`` (appended
across restarts), ``progress.json``, ``checkpoint.pt``, ``exit.json`` and, when it ran out of GPU memory,
``oom.json``. A member with a ``memory_limit_bytes`` (``colocate serve``: every member of a group)
gets the sharing mode's own limit in its environment beside the group's daemon (MPS:
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, :attr:`profiler.gpu.sharing.SharingMode.client_memory_env`); its
``COLOCATE_MEMORY_LIMIT_BYTES`` is in ``env``.

A job with an ``owner`` (:meth:`common.owners.Owner.to_dict`; ``colocate serve --users multi`` as root) runs as
that user: its reaper makes the job's process the owner's (uid, gid, groups, umask 077) after it joined its cgroup;
``HOME``/``USER``/``LOGNAME`` are the owner's and it starts in its own directory. The directory (0700), its log
(0600) and the records written for it belong to the owner, so no other user reads or writes them; the supervisor,
its reaper and the MPS daemon stay the server's (root: it still reads every record and kills what is left).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from common.contain import kill_cgroup, make_cgroup, remove_cgroup
from common.errors import InputError
from common.files import atomic_write_text
from common.owners import Owner, give_fd, give_to, reachable_by
from common.untrusted import UntrustedFile, read_regular
from scheduler.executor.group_doc import GroupDoc, GroupMember
from scheduler.executor.job_files import MAX_RECORD_BYTES, job_records, last_line

POLL_S = 0.2
KILL_WAIT_S = 5.0  # how long a job's reaper gets to kill its tree before it is killed with its process group
EXIT_FILE = "exit.json"
LOG_FILE = "train.log"
PROGRESS_FILE = "progress.json"
OOM_FILE = "oom.json"  # what a job that ran out of GPU memory reached (job_files.check_oom)
STOP_FILE = "stop"
CHECKPOINT_FILE = "checkpoint.pt"
GENERATION_FILE = "generation"

# Every job runs under a reaper (:mod:`common.contain`), the leader of the job's own process group and, where the
# cgroup v2 hierarchy is writable, with the job in a cgroup of its own: whatever the job starts — a child that left
# its session with setsid included — is killed when the job ends, when its supervisor kills it after the grace
# (SIGUSR1 to the reaper, and the cgroup) and when the supervisor dies (the reaper's parent-death signal).
def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22); None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
    if fields[0] == "Z":
        return None  # a zombie has ended
    return int(fields[19])


def process_alive(pid: int, start_time: int | None) -> bool:
    """Whether ``pid`` is still the process that was started (a reused pid has another start time)."""
    if pid <= 0:
        return False
    with _suppress_child():
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our ended child
    now = process_start_time(pid)
    return now is not None and (start_time is None or now == start_time)


class _suppress_child:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return exc[0] is not None and issubclass(exc[0], ChildProcessError)


def spawn_supervisor(group_file: Path, *, env: dict[str, str] | None = None,
                     die_with_parent: bool = False) -> dict[str, Any]:
    """Start a detached supervisor for ``group_file``; returns ``{"pid", "start_time"}``.

    The jobs' exit and progress records of an earlier run are removed first, synchronously: the supervisor
    takes a while to start, and a poll in between must not read the last run's end as this run's.
    """
    from scheduler.executor.command import PDEATHSIG_EXEC

    prepare_jobs(GroupDoc.read(group_file))
    argv = [sys.executable, "-m", "scheduler.executor.supervise", str(group_file)]
    if die_with_parent:  # the same pid after exec, with a parent-death signal
        argv = [sys.executable, "-c", PDEATHSIG_EXEC, str(os.getpid()), *argv]
    log = open(group_file.with_suffix(".log"), "ab")
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    with log:
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                 start_new_session=True)
    return {"pid": popen.pid, "start_time": process_start_time(popen.pid)}


def prepare_jobs(doc: GroupDoc) -> None:
    """Before a new supervisor of ``doc`` starts (here or in a Slurm job): its generation fences earlier copies,
    and the jobs' exit, progress and out-of-memory records of an earlier run are removed."""
    for job in doc.jobs:
        job.path.mkdir(parents=True, exist_ok=True)
        if job.owner is not None:
            _hand_over(job.path, job.owner)
        _write_atomic(job.path / GENERATION_FILE, doc.key, job.owner)
        for name in (EXIT_FILE, PROGRESS_FILE, OOM_FILE):
            _remove(job.path / name)


def _hand_over(job_dir: Path, owner: Owner) -> None:
    """The job's directory becomes its owner's, 0700; refused (one line, the group's start fails and is retried)
    when the owner could not even reach it."""
    blocked = reachable_by(job_dir, owner)
    if blocked is not None:
        raise PermissionError(f"{owner.name} cannot enter {blocked}, above its job directory: make it searchable "
                              "(chmod o+x; the state directory 0711)")
    give_to(job_dir, owner, 0o700)


def read_json(path: Path) -> dict[str, Any] | None:
    """A small JSON object (a pid file, a record), read bounded; None when absent or not one."""
    try:
        data = read_regular(path.parent, path.name, max_bytes=MAX_RECORD_BYTES)
        value = json.loads(data) if data is not None else None
    except (UntrustedFile, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _remove(path: Path) -> None:
    """Remove whatever a job left at ``path`` (a file, a link, a pipe, a directory); never follows a link."""
    try:
        path.unlink(missing_ok=True)
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)
    except PermissionError:  # a directory on some systems
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)


def open_log(path: Path) -> int:
    """The job's log opened for appending: a regular file of its own (a link, a pipe or a directory the job
    left there is moved out of the way first, so the supervisor neither blocks nor writes elsewhere)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(3):
        try:
            fd = os.open(path, flags, 0o644)
        except OSError:  # a link (ELOOP), a pipe without a reader (ENXIO), a directory (EISDIR)
            _remove(path)
            continue
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.set_blocking(fd, True)
            return fd
        os.close(fd)
        _remove(path)
    raise OSError(f"cannot create a regular log file at {path}")


def _start_job(job: GroupMember, base_env: dict[str, str], cgroup: Path | None) -> subprocess.Popen[bytes]:
    job_dir = job.path
    job_dir.mkdir(parents=True, exist_ok=True)
    _remove(job_dir / EXIT_FILE)
    _remove(job_dir / STOP_FILE)
    _remove(job_dir / OOM_FILE)
    owner = job.owner
    fd = open_log(job_dir / LOG_FILE)
    if owner is not None:  # its log is the owner's alone (the descriptor's file: nothing swapped in is touched)
        give_fd(fd, owner, 0o600)
    log = os.fdopen(fd, "ab")
    with log:
        log.write(f"# colocate serve: {job.name} started {time.strftime('%Y-%m-%d %H:%M:%S')}; "
                  f"argv: {list(job.argv)}\n".encode())
        log.flush()
        contained = ["--cgroup", str(cgroup)] if cgroup is not None else []
        env = {**base_env, **job.env}
        if owner is not None:  # the job's own process becomes its owner
            contained += ["--user", owner.arg()]
            env.update(owner.environment())
        return subprocess.Popen([sys.executable, "-m", "common.contain", str(os.getpid()), *contained, "--",
                                 *job.argv],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=job_dir if owner is not None else None)


def _write_pid_file(doc: GroupDoc, jobs: dict[str, list[Any]], cgroups: dict[str, str] | None = None) -> None:
    if not doc.pid_record:  # a Slurm job run as its owner: its handle is the job id (runs/ is root's)
        return
    pid_file = Path(doc.pid_file)
    temp = pid_file.with_name(f".{pid_file.name}.tmp")
    temp.write_text(json.dumps({"pid": os.getpid(), "start_time": process_start_time(os.getpid()), "jobs": jobs,
                                "cgroups": cgroups or {}}))
    os.replace(temp, pid_file)


def _write_atomic(path: Path, text: str, owner: Owner | None = None) -> None:
    """Replace ``path`` by ``text``: a fresh temporary name (``O_EXCL``, so no link a job left is followed),
    renamed over whatever is there (a directory the job made there is removed first); ``owner``'s, 0600, if any."""
    if path.is_dir() and not path.is_symlink():
        _remove(path)
    if owner is None:
        atomic_write_text(path, text, durable=False)
        return
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # O_EXCL, 0600: the owner's before
    try:                                                                   # it has the record's name
        give_fd(fd, owner, 0o600)
        os.write(fd, text.encode())
        os.replace(temp, path)
    except OSError:
        Path(temp).unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


def superseded(job: GroupMember, key: str | None) -> bool:
    """Whether a newer start of ``job`` owns its directory (its generation file names another group). A
    generation file that is not a small regular file was not written by a server: the copy stops too."""
    if key is None:
        return False
    try:
        data = read_regular(job.path, GENERATION_FILE, max_bytes=256)
    except UntrustedFile:
        return True
    return data is not None and data.decode(errors="replace").strip() != key


def _write_exit(job: GroupMember, code: int, stop_requested: bool, key: str | None = None) -> None:
    if superseded(job, key):
        return  # a stale copy: its end is not the job's end
    job_dir = job.path
    payload = {"returncode": code, "stop_requested": stop_requested, "ended_at": time.time(),
               "last_line": last_line(job_dir / LOG_FILE), "generation": key}
    try:
        _write_atomic(job_dir / EXIT_FILE, json.dumps(payload), job.owner)
    except OSError:  # the job's directory is gone or unwritable: the server sees its group end without a record
        pass


def supervise(doc: GroupDoc) -> int:
    """Run the group of ``doc`` to its end (or until a stop request); returns the first status of a job that
    failed without being asked to stop (128 + N for signal N), else 0 — a Slurm job fails with its member."""
    from profiler.gpu.sharing import sharing_mode

    stop: dict[str, float | None] = {"at": None}
    key = doc.key

    def request_stop(signum: int, frame: Any) -> None:
        if stop["at"] is None:
            stop["at"] = time.monotonic()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    _write_pid_file(doc, {})  # how a restarted server finds this group even if it died before recording it
    env = dict(os.environ)
    if doc.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = doc.cuda_visible_devices
    failed = 0
    with ExitStack() as daemons:
        # the group's sharing mode sets itself up for its jobs (MPS: a private daemon; solo "none": nothing),
        # unless whoever started this supervisor did it already (a Slurm batch script: the mode's slurm_setup)
        mode = sharing_mode(doc.sharing)
        if not doc.sharing_ready:
            env.update(mode.enter(daemons, env.get("CUDA_VISIBLE_DEVICES"), None))
        running: dict[str, tuple[GroupMember, subprocess.Popen[bytes]]] = {}
        cgroups: dict[str, Path | None] = {}
        daemons.callback(_remove_cgroups, cgroups)  # what is left of the jobs, before the daemon quits
        for job in doc.jobs:
            if stop["at"] is not None:  # stopped before it started: nothing ran, nothing to lose
                _write_exit(job, -signal.SIGTERM, True, key)
            else:  # a client of the group's mode (MPS: no CUDA_VISIBLE_DEVICES of its own, its client memory limit)
                cgroups[job.name] = make_cgroup(f"{key}-{job.name}")
                job_env = mode.client_environment(env, job.memory_limit_bytes)
                running[job.name] = (job, _start_job(job, job_env, cgroups[job.name]))
        # the jobs' process groups and cgroups too: a user command's children may not die with the supervisor
        _write_pid_file(doc, {name: [p.pid, process_start_time(p.pid)] for name, (_, p) in running.items()},
                        {name: str(c) for name, c in cgroups.items() if c is not None})
        signalled: set[str] = set()
        alone: dict[str, float] = {}  # jobs asked to stop by their own stop file -> when
        while running:
            for name, (job, popen) in list(running.items()):
                code = popen.poll()
                if name not in alone and os.path.lexists(job.path / STOP_FILE):
                    alone[name] = time.monotonic()
                asked = stop["at"] if stop["at"] is not None else alone.get(name)
                if code is None and superseded(job, key):  # fenced: a newer copy runs this job
                    _kill_job(popen, cgroups.get(name))
                    del running[name]
                elif code is not None:
                    remove_cgroup(cgroups.pop(name, None))  # a reaper killed on its own leaves its job's cgroup
                    _write_exit(job, code, asked is not None, key)
                    if code != 0 and asked is None and not failed:
                        failed = code if code > 0 else 128 - code
                    del running[name]
                elif asked is not None:
                    if time.monotonic() - asked > doc.grace_s:
                        _kill_job(popen, cgroups.get(name))  # its end is recorded at the next look
                    elif name not in signalled:
                        _signal(popen.pid, signal.SIGTERM)
                        signalled.add(name)
            time.sleep(POLL_S)
    return failed


def request_job_stop(job_dir: Path) -> None:
    """Ask one job of a running group to stop (checkpoint and exit) without touching the others. Whatever
    the job left under the stop file's name already asks for it (the supervisor only looks whether it exists);
    nothing there is opened or followed."""
    job_dir.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(job_dir / STOP_FILE):
        return
    try:
        os.close(os.open(job_dir / STOP_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644))
    except FileExistsError:
        pass


def _remove_cgroups(cgroups: dict[str, Path | None]) -> None:
    for path in cgroups.values():
        remove_cgroup(path)


def _kill_job(popen: subprocess.Popen[bytes], cgroup: Path | None) -> None:
    """Kill a job and everything it started, and wait for its reaper: its cgroup, then the reaper (SIGUSR1: it kills
    its process tree and group, itself last); a reaper that has not ended within :data:`KILL_WAIT_S` (stopped, say)
    gets SIGKILL with its process group."""
    kill_cgroup(cgroup)
    _signal_process(popen.pid, signal.SIGUSR1)
    try:
        popen.wait(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        _signal(popen.pid, signal.SIGKILL)
        popen.wait()


def _signal(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m scheduler.executor.supervise GROUP.json", file=sys.stderr)
        return 2
    try:
        doc = GroupDoc.read(args[0])
    except InputError as err:  # a damaged document: one line, nothing started
        print(f"supervise: {err}", file=sys.stderr)
        return 2
    return supervise(doc)



def group_files(doc: GroupDoc) -> dict[str, dict[str, Any]]:
    """What each job of a group has written: ``{name: {"progress", "exit", "oom", "problem"}}`` — each record read
    bounded and checked (:mod:`.job_files`), None when absent; ``problem`` names a bad file, else None."""
    out = {}
    for job in doc.jobs:
        files = job_records(job.dir, PROGRESS_FILE, EXIT_FILE, OOM_FILE)
        ended = files["exit"]
        if ended is not None and ended.get("generation", doc.key) != doc.key:
            files["exit"] = None  # an older copy's end (fenced): not this group's
        out[job.name] = files
    return out


def supervisor_alive(doc: GroupDoc, handle: dict[str, Any]) -> bool:
    """Whether the group's supervisor still runs (pid from the handle, else from its pid file)."""
    pid, start = handle.get("pid"), handle.get("start_time")
    if pid is None:
        recorded = read_json(Path(doc.pid_file))
        if recorded is None:
            return False
        pid, start = recorded["pid"], recorded["start_time"]
    return process_alive(int(pid), start)


def signal_supervisor(doc: GroupDoc, handle: dict[str, Any], signum: int) -> None:
    """Send ``signum`` to the supervisor (SIGTERM: stop the group; SIGKILL also reaches its jobs' groups)."""
    recorded = read_json(Path(doc.pid_file)) or {}
    pid, start = handle.get("pid", recorded.get("pid")), handle.get("start_time", recorded.get("start_time"))
    if signum == signal.SIGKILL:  # a kill reaches the jobs' cgroups, reapers and process groups as well
        for path in (recorded.get("cgroups") or {}).values():
            remove_cgroup(Path(path), timeout_s=1.0)
        for job_pid, job_start in (recorded.get("jobs") or {}).values():
            # the group outlives its leader while any member lives (and its id cannot be reused then); a
            # different process under the leader's pid means the id was reused: leave that one alone
            if process_alive(int(job_pid), job_start):  # its reaper kills its tree (escaped children too)
                _signal_process(int(job_pid), signal.SIGUSR1)
            elif process_start_time(int(job_pid)) is None:
                _signal(int(job_pid), signal.SIGKILL)
    if pid is not None and process_alive(int(pid), start):
        _signal_process(int(pid), signum)


def _signal_process(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


if __name__ == "__main__":
    sys.exit(main())
