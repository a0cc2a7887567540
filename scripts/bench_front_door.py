"""The front door of ``colocate serve`` timed as users meet it: ``colocate submit`` idle, 200 jobs from 4 parallel
submitters while a server runs, and ``colocate jobs --json`` while they submit.

    PYTHONPATH=$PWD python scripts/bench_front_door.py [--jobs 200] [--submitters 4] [--batch 1]

Each submit and each ``jobs --json`` is a fresh ``python -m colocate.cli`` process (what a shell script pays:
interpreter, imports, SQLite). The server runs on the local backend with 4 logical GPUs and ``--round-s``
(10 s by default; each round solves the ILP over every queued job, which on a 2-core machine competes with
the submitters);
the jobs are ``sleep`` commands, so what loads the machine is the front door and the rounds. Prints wall
seconds and, for the idle submit, the process's CPU seconds (on a shared machine the wall time includes
waiting for a core; ``python -c pass`` is timed as the floor).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _run(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(argv, check=True, env=ENV, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


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
        floor = statistics.median(_run([sys.executable, "-c", "pass"])[0] for _ in range(args.idle_runs))
        idle = [_run(_cli("submit", "--state", str(root / "idle"), str(_job_file(root, f"idle{i}"))))
                for i in range(args.idle_runs)]
        print(f"python -c pass: {floor:.3f} s wall (median of {args.idle_runs})")
        print(f"submit, idle: {statistics.median(w for w, _ in idle):.3f} s wall, "
              f"{statistics.median(c for _, c in idle):.3f} s CPU (median of {args.idle_runs})")
        state = root / "state"
        cluster = root / "cluster.yaml"
        cluster.write_text("gpu_types:\n  t4: {nodes: 1, gpus_per_node: 4, memory_gb: 16}\n")
        server = subprocess.Popen(_cli("serve", "--cluster", str(cluster), "--state", str(state), "--backend",
                                       "local", "--device", "cpu", "--round-s", str(args.round_s), "--grace", "5"),
                                  env=ENV, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _run_load(root, state, args)
        finally:
            server.terminate()
            server.wait(timeout=120)
            _kill_groups(state)


def _run_load(root: Path, state: Path, args: argparse.Namespace) -> None:
    per = args.jobs // args.submitters
    files = [[_job_file(root, f"s{s}j{i}") for i in range(per)] for s in range(args.submitters)]
    done = threading.Event()
    polls: list[float] = []

    def submitter(paths: list[Path]) -> None:
        for at in range(0, len(paths), args.batch):
            _run(_cli("submit", "--state", str(state), *map(str, paths[at:at + args.batch])))

    def poller() -> None:
        while not done.is_set():
            polls.append(_run(_cli("jobs", "--state", str(state), "--json"))[0])

    time.sleep(3.0)  # the server is up and running rounds
    threads = [threading.Thread(target=submitter, args=(paths,)) for paths in files]
    watcher = threading.Thread(target=poller)
    began = time.perf_counter()
    for t in threads:
        t.start()
    watcher.start()
    for t in threads:
        t.join()
    total = time.perf_counter() - began
    done.set()
    watcher.join()
    print(f"{per * args.submitters} jobs from {args.submitters} parallel submitters, {args.batch} per call: "
          f"{total:.1f} s")
    print(f"jobs --json while they submit: median {statistics.median(polls):.3f} s, max {max(polls):.3f} s "
          f"({len(polls)} calls)")


def _kill_groups(state: Path) -> None:
    import signal

    from scheduler.executor.supervise import process_alive, read_json

    for pid_file in (state / "runs").glob("*.pid"):
        recorded = read_json(pid_file)
        if recorded and process_alive(recorded["pid"], recorded["start_time"]):
            os.kill(recorded["pid"], signal.SIGKILL)


if __name__ == "__main__":
    main()
