"""The front door of ``colocate serve`` timed as users meet it: ``colocate submit`` idle, 200 jobs from 4 parallel
submitters while a server runs, and ``colocate jobs --json`` while they submit.

    PYTHONPATH=$PWD python scripts/bench_front_door.py [--jobs 200] [--submitters 4] [--batch 1]

Each submit and each ``jobs --json`` is a fresh ``python -m colocate.cli`` process (what a shell script pays:
interpreter, imports, SQLite). The server runs on the local backend with 4 logical GPUs and ``--round-s``
(10 s by default; each round solves the ILP over every queued job, which on a 2-core machine competes with
the submitters);
the jobs are ``sleep`` commands, so what loads the machine is the front door and the rounds. Prints wall
seconds beside CPU seconds of every process (read by ``wait4``: on a shared machine the wall time includes
waiting for a core) and the load average; ``python -c pass`` is timed as the floor. For the parallel phase
it prints the CPU seconds the submitters, the ``jobs --json`` poller (one call after another, the busiest
dashboard) and the server spent, and their sum over the cores as the wall time an otherwise idle machine would
need at least ("idle-equivalent"; with and without the poller, which alone keeps a core busy).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
CORES = len(os.sched_getaffinity(0))


def _run(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one child process (its own rusage: safe with several threads running children)."""
    began = time.perf_counter()
    child = subprocess.Popen(argv, env=ENV, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - began
    child.returncode = os.waitstatus_to_exitcode(status)
    stderr = child.stderr.read().decode() if child.stderr else ""
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:4])} failed ({child.returncode}): {stderr.strip()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a running process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load() -> str:
    return "load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg())


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "colocate.cli", *args]


def _job_file(directory: Path, name: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(f"name: {name}\ncommand: sleep 20\napplication: sleeper\nsteps: 10\nbatch_size: 4\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--submitters", type=int, default=4)
    parser.add_argument("--idle-runs", type=int, default=5)
    parser.add_argument("--round-s", type=float, default=10.0, help="the server's --round-s")
    parser.add_argument("--batch", type=int, default=1, help="job files per submit call (1: one process per job)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="colocate-front-door-") as tmp:
        root = Path(tmp)
        print(f"{CORES} cores, {_load()}")
        floor = [_run([sys.executable, "-c", "pass"]) for _ in range(args.idle_runs)]
        idle = [_run(_cli("submit", "--state", str(root / "idle"), str(_job_file(root, f"idle{i}"))))
                for i in range(args.idle_runs)]
        jobs_idle = [_run(_cli("jobs", "--state", str(root / "idle"), "--json")) for _ in range(args.idle_runs)]
        _print("python -c pass", floor)
        _print("submit, no server", idle)
        _print(f"jobs --json, {args.idle_runs} jobs, no server", jobs_idle)
        state = root / "state"
        cluster = root / "cluster.yaml"
        cluster.write_text("gpu_types:\n  t4: {nodes: 1, gpus_per_node: 4, memory_gb: 16}\n")
        server = subprocess.Popen(_cli("serve", "--cluster", str(cluster), "--state", str(state), "--backend",
                                       "local", "--device", "cpu", "--round-s", str(args.round_s), "--grace", "5"),
                                  env=ENV, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _run_load(root, state, server.pid, args)
        finally:
            server.terminate()
            server.wait(timeout=120)
            _kill_groups(state)
        _print(f"jobs --json, {args.jobs} jobs, server stopped",
               [_run(_cli("jobs", "--state", str(state), "--json")) for _ in range(args.idle_runs)])


def _print(what: str, runs: list[tuple[float, float]]) -> None:
    print(f"{what}: {statistics.median(w for w, _ in runs):.3f} s wall, {statistics.median(c for _, c in runs):.3f} "
          f"s CPU (median of {len(runs)})")


def _run_load(root: Path, state: Path, server: int, args: argparse.Namespace) -> None:
    per = args.jobs // args.submitters
    files = [[_job_file(root, f"s{s}j{i}") for i in range(per)] for s in range(args.submitters)]
    done = threading.Event()
    polls: list[tuple[float, float]] = []
    submits: list[tuple[float, float]] = []

    failures: list[str] = []

    def submitter(paths: list[Path]) -> None:
        for at in range(0, len(paths), args.batch):
            try:
                submits.append(_run(_cli("submit", "--state", str(state), *map(str, paths[at:at + args.batch]))))
            except SystemExit as failed:  # a thread's SystemExit would vanish: count it, say why
                failures.append(str(failed))

    def poller() -> None:
        while not done.is_set():
            try:
                polls.append(_run(_cli("jobs", "--state", str(state), "--json")))
            except SystemExit as failed:
                failures.append(str(failed))

    began = time.monotonic()
    while not (state / "state.db").exists() and time.monotonic() - began < 300:
        time.sleep(0.5)  # on a loaded machine the server takes a while to create its state
    time.sleep(3.0)  # the server is up and running rounds
    server_before = _process_cpu(server)
    threads = [threading.Thread(target=submitter, args=(paths,)) for paths in files]
    watcher = threading.Thread(target=poller)
    began = time.perf_counter()
    for t in threads:
        t.start()
    watcher.start()
    for t in threads:
        t.join()
    total = time.perf_counter() - began
    server_cpu = _process_cpu(server) - server_before
    done.set()
    watcher.join()
    submit_cpu, poll_cpu = sum(c for _, c in submits), sum(c for _, c in polls)
    print(f"{per * args.submitters} jobs from {args.submitters} parallel submitters, {args.batch} per call: "
          f"{total:.1f} s wall; CPU: submitters {submit_cpu:.1f} s ({statistics.median(c for _, c in submits):.3f} "
          f"s per call), poller {poll_cpu:.1f} s, server {server_cpu:.1f} s; idle-equivalent on {CORES} cores: "
          f"{(submit_cpu + server_cpu) / CORES:.1f} s, {(submit_cpu + server_cpu + poll_cpu) / CORES:.1f} s with "
          f"the poller; {_load()}")
    if failures:
        print(f"{len(failures)} call(s) FAILED, e.g. {failures[0]}")
    _print("submit while they submit", submits)
    print(f"jobs --json while they submit: median {statistics.median(w for w, _ in polls):.3f} s wall, max "
          f"{max(w for w, _ in polls):.3f} s, {statistics.median(c for _, c in polls):.3f} s CPU ({len(polls)} calls)")


def _kill_groups(state: Path) -> None:
    import signal

    from scheduler.executor.supervise import process_alive, read_json

    for pid_file in (state / "runs").glob("*.pid"):
        recorded = read_json(pid_file)
        if recorded and process_alive(recorded["pid"], recorded["start_time"]):
            os.kill(recorded["pid"], signal.SIGKILL)


if __name__ == "__main__":
    main()
