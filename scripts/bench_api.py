"""The server's API timed: a submission through the Unix socket and through HTTP on loopback (p50 of calls from
one client), 1,000 submissions one after another, then a round's wall time (1,000 jobs queued) and the server's
CPU with and without the API serving 50 ``jobs`` calls a second.

    PYTHONPATH=$PWD python scripts/bench_api.py [--calls 100] [--many 1000] [--window-s 20] [--call jobs|whoami]

A ``colocate serve`` (local backend, 2 logical GPUs, ``--policy fifo``, ``--round-s 1``) runs in its own process;
the jobs are ``sleep`` commands. Each call is the client of ``scheduler.service.front.remote`` in this process (what
``colocate submit`` does after its imports), so the times are the API's, not an interpreter's start-up. A call is
answered between rounds (the round loop's thread runs it), so a call that arrives during a round waits for it.
A round's wall time is what the server records for it (``last_round``), averaged over the rounds of a window; the
server's CPU is its process's user + system time (``/proc/PID/stat``) a second over that window (the API's thread
included).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.service.front.remote import ApiClient  # noqa: E402


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spec(name: str) -> dict[str, object]:
    # one application for every job: distinct command jobs are distinct job types, whose pairs a round prices
    return {"name": name, "command": "sleep 600", "application": "bench-sleep", "steps": 1, "batch_size": 1}


def _p50(client: ApiClient, prefix: str, calls: int) -> float:
    times = []
    for i in range(calls):
        began = time.perf_counter()
        client.call("submit", {"jobs": [{"spec": _spec(f"{prefix}-{i}")}]})
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def _rounds(root: ApiClient, pid: int, window_s: float, load: bool, call: str) -> tuple[float, float]:
    """(mean wall ms of the rounds in a window, the server's CPU ms a second), idle or with 50 calls a second."""
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            began = time.perf_counter()
            root.call(call)
            time.sleep(max(0.0, 0.02 - (time.perf_counter() - began)))  # 50 calls a second

    poller = threading.Thread(target=poll)
    if load:
        poller.start()
    cpu0, began, seen = _cpu_s(pid), time.monotonic(), {}
    while time.monotonic() - began < window_s:  # each round's wall time, as the server records it
        done = root.call("jobs")
        seen[done["rounds"]] = float(str(done["last_round"]).split(" s total")[0])
        time.sleep(0.5)
    cpu = (_cpu_s(pid) - cpu0) / (time.monotonic() - began)
    stop.set()
    if load:
        poller.join()
    return statistics.mean(seen.values()) * 1000, cpu * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--many", type=int, default=1000)
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--call", default="jobs", choices=("jobs", "whoami"),
                        help="the call made 50 times a second: jobs (every job, the heaviest) or whoami (the lightest)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="colocate-bench-api-"))
    (base / "cluster.yaml").write_text("gpu_types:\n  v100: {nodes: 1, gpus_per_node: 2, memory_gb: 16}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "colocate.cli", "serve", "--cluster", str(base / "cluster.yaml"), "--state",
            str(base / "state"), "--backend", "local", "--device", "cpu", "--policy", "fifo", "--round-s", "1",
            "--api-port", str(port), "--set", "serve.api.rate_per_s=1000",  # the calls, not the limit, timed
            "--set", "serve.api.request_timeout_s=600"]
    server = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=open(base / "serve.log", "wb"))
    try:
        while not (base / "state.sock").exists():
            time.sleep(0.1)
        root = ApiClient("bench", socket=base / "state.sock")
        made = root.call("token-create", {"user": root.call("whoami")["user"], "expires_s": 3600})
        web = ApiClient("bench", url=f"http://127.0.0.1:{port}", token=made["token"])
        socket_ms, http_ms = _p50(root, "s", args.calls), _p50(web, "h", args.calls)
        began, slowest = time.perf_counter(), 0.0
        for i in range(args.many):
            one = time.perf_counter()
            root.call("submit", {"jobs": [{"spec": _spec(f"m-{i}")}]})
            slowest = max(slowest, time.perf_counter() - one)
        many_s = time.perf_counter() - began
        (idle, idle_cpu), (loaded, loaded_cpu) = (_rounds(root, server.pid, args.window_s, load, args.call)
                                                  for load in (False, True))
        print(json.dumps({"socket_submit_p50_ms": round(socket_ms, 1), "http_submit_p50_ms": round(http_ms, 1),
                          f"{args.many}_submissions_s": round(many_s, 1),
                          "slowest_submission_s": round(slowest, 2),
                          f"round_ms_{args.many}_queued_idle": round(idle, 1),
                          "round_ms_50_rps": round(loaded, 1), "ratio": round(loaded / idle, 2) if idle else None,
                          "server_cpu_ms_per_s_idle": round(idle_cpu), "server_cpu_ms_per_s_50_rps": round(loaded_cpu),
                          "call": args.call,
                          "load_average": round(os.getloadavg()[0], 1)}, indent=2))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
        for pid_file in (base / "state" / "runs").glob("*.pid"):  # the sleep jobs' supervisors
            try:
                os.kill(json.loads(pid_file.read_text())["pid"], signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                pass
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
