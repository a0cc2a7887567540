"""The supervisor of one GPU group in ``colocate serve``: ``python -m scheduler.executor.supervise GROUP.json``.

The server (local backend) or a Ray actor (Ray backend) starts one supervisor per GPU group, in its own
session and without a parent-death signal, so the group outlives the server: ``kill -9`` of ``colocate serve``
leaves it training, and the restarted server re-adopts it by pid and start time (:func:`process_alive`).

The supervisor starts a private MPS daemon when the group shares by MPS (:func:`profiler.gpu.mps.mps_daemon`),
starts every job of the group (each in its own session, with ``PR_SET_PDEATHSIG``, so jobs never outlive
their supervisor), waits for them, and writes each job's ``exit.json`` (return code, whether it was asked to
stop, its last log line) when it ends. SIGTERM or SIGINT to the supervisor is the stop request: it is passed
to every job's process group; after ``grace_s`` what is left is killed; the MPS daemon quits last.

``GROUP.json``: ``{"key", "sharing", "cuda_visible_devices" (null on CPU), "grace_s", "pid_file",
"jobs": [{"name", "argv", "env", "dir"}]}``; a job's ``dir`` holds ``train.log`` (appended across
restarts), ``progress.json``, ``checkpoint.pt`` and ``exit.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

POLL_S = 0.2
EXIT_FILE = "exit.json"
LOG_FILE = "train.log"
PROGRESS_FILE = "progress.json"
CHECKPOINT_FILE = "checkpoint.pt"


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


def spawn_supervisor(group_file: Path, *, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Start a detached supervisor for ``group_file``; returns ``{"pid", "start_time"}``.

    The jobs' exit and progress records of an earlier run are removed first, synchronously: the supervisor
    takes a while to start, and a poll in between must not read the last run's end as this run's.
    """
    for job in json.loads(group_file.read_text())["jobs"]:
        for name in (EXIT_FILE, PROGRESS_FILE):
            (Path(job["dir"]) / name).unlink(missing_ok=True)
    log = open(group_file.with_suffix(".log"), "ab")
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    with log:
        popen = subprocess.Popen([sys.executable, "-m", "scheduler.executor.supervise", str(group_file)],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                 start_new_session=True)
    return {"pid": popen.pid, "start_time": process_start_time(popen.pid)}


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def last_line(path: Path, limit: int = 300) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(max(fh.seek(0, os.SEEK_END) - 8192, 0))
            lines = [ln for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:limit] if lines else ""


def _start_job(job: dict[str, Any], base_env: dict[str, str]) -> subprocess.Popen[bytes]:
    from scheduler.executor.local import _PDEATHSIG_EXEC

    job_dir = Path(job["dir"])
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / EXIT_FILE).unlink(missing_ok=True)
    log = open(job_dir / LOG_FILE, "ab")
    with log:
        log.write(f"# colocate serve: {job['name']} started {time.strftime('%Y-%m-%d %H:%M:%S')}; "
                  f"argv: {job['argv']}\n".encode())
        log.flush()
        return subprocess.Popen([sys.executable, "-c", _PDEATHSIG_EXEC, str(os.getpid()), *job["argv"]],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env={**base_env, **job["env"]}, start_new_session=True)


def _write_pid_file(doc: dict[str, Any], jobs: dict[str, list[Any]]) -> None:
    pid_file = Path(doc["pid_file"])
    temp = pid_file.with_name(f".{pid_file.name}.tmp")
    temp.write_text(json.dumps({"pid": os.getpid(), "start_time": process_start_time(os.getpid()), "jobs": jobs}))
    os.replace(temp, pid_file)


def _write_exit(job: dict[str, Any], code: int, stop_requested: bool) -> None:
    job_dir = Path(job["dir"])
    payload = {"returncode": code, "stop_requested": stop_requested, "ended_at": time.time(),
               "last_line": last_line(job_dir / LOG_FILE)}
    temp = job_dir / f".{EXIT_FILE}.tmp"
    temp.write_text(json.dumps(payload))
    os.replace(temp, job_dir / EXIT_FILE)


def supervise(doc: dict[str, Any]) -> int:
    """Run the group of ``doc`` to its end (or until a stop request); returns 0."""
    from profiler.gpu.sharing import sharing_mode

    stop: dict[str, float | None] = {"at": None}

    def request_stop(signum: int, frame: Any) -> None:
        if stop["at"] is None:
            stop["at"] = time.monotonic()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    _write_pid_file(doc, {})  # how a restarted server finds this group even if it died before recording it
    env = dict(os.environ)
    if doc.get("cuda_visible_devices") is not None:
        env["CUDA_VISIBLE_DEVICES"] = doc["cuda_visible_devices"]
    with ExitStack() as daemons:
        # the group's sharing mode sets itself up for its jobs (MPS: a private daemon; solo "none": nothing)
        env.update(sharing_mode(doc["sharing"]).enter(daemons, env.get("CUDA_VISIBLE_DEVICES"), None))
        running = {}
        for job in doc["jobs"]:
            if stop["at"] is not None:  # stopped before it started: nothing ran, nothing to lose
                _write_exit(job, -signal.SIGTERM, True)
            else:
                running[job["name"]] = (job, _start_job(job, env))
        # the jobs' process groups too: a user command's children may not die with the supervisor
        _write_pid_file(doc, {name: [p.pid, process_start_time(p.pid)] for name, (_, p) in running.items()})
        signalled: set[str] = set()
        while running:
            for name, (job, popen) in list(running.items()):
                code = popen.poll()
                if code is not None:
                    _write_exit(job, code, stop["at"] is not None)
                    del running[name]
                elif stop["at"] is not None:
                    late = time.monotonic() - stop["at"] > float(doc.get("grace_s", 30.0))
                    if name not in signalled or late:
                        _signal(popen.pid, signal.SIGKILL if late else signal.SIGTERM)
                        signalled.add(name)
            time.sleep(POLL_S)
    return 0


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
    return supervise(json.loads(Path(args[0]).read_text()))


if __name__ == "__main__":
    sys.exit(main())


def group_files(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What each job of a group has written: ``{name: {"progress": ..., "exit": ...}}`` (None when absent)."""
    return {job["name"]: {"progress": read_json(Path(job["dir"]) / PROGRESS_FILE),
                          "exit": read_json(Path(job["dir"]) / EXIT_FILE)} for job in doc["jobs"]}


def supervisor_alive(doc: dict[str, Any], handle: dict[str, Any]) -> bool:
    """Whether the group's supervisor still runs (pid from the handle, else from its pid file)."""
    pid, start = handle.get("pid"), handle.get("start_time")
    if pid is None:
        recorded = read_json(Path(doc["pid_file"]))
        if recorded is None:
            return False
        pid, start = recorded["pid"], recorded["start_time"]
    return process_alive(int(pid), start)


def signal_supervisor(doc: dict[str, Any], handle: dict[str, Any], signum: int) -> None:
    """Send ``signum`` to the supervisor (SIGTERM: stop the group; SIGKILL also reaches its jobs' groups)."""
    recorded = read_json(Path(doc["pid_file"])) or {}
    pid, start = handle.get("pid", recorded.get("pid")), handle.get("start_time", recorded.get("start_time"))
    if signum == signal.SIGKILL:  # a kill reaches the jobs' process groups as well
        for job_pid, job_start in (recorded.get("jobs") or {}).values():
            if process_alive(int(job_pid), job_start):
                _signal(int(job_pid), signal.SIGKILL)
    if pid is None or not process_alive(int(pid), start):
        return
    try:
        os.kill(int(pid), signum)
    except (ProcessLookupError, PermissionError):
        pass
