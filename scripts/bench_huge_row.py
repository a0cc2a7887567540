"""Round time and memory of a server whose state holds one huge damaged row (a BLOB written into a job's spec).

    PYTHONPATH=$PWD python scripts/bench_huge_row.py --mib 300 --rounds 5

The row is set aside unread (scheduler/service/state/bounded.py): rounds should cost what they cost without it.
"""

from __future__ import annotations

import argparse
import resource
import sqlite3
import tempfile
import time
from pathlib import Path

from scheduler.executor.registry import make_executor
from scheduler.model.cluster import cluster_from_dict
from scheduler.service.config import ServeConfig
from scheduler.service.jobs.jobspec import job_from_dict
from scheduler.service.server import Server
from scheduler.service.state.store import StateStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=300, help="size of the damaged row's BLOB, MiB")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = StateStore(Path(tmp) / "state")
        state.submit(job_from_dict({"name": "queued", "command": "sleep 60", "application": "mine", "steps": 1,
                                    "batch_size": 4, "gpu_types": ["v100"]}))  # a sound job: rounds have work
        state.submit(job_from_dict({"name": "victim", "command": "sleep 60", "application": "mine", "steps": 1,
                                    "batch_size": 4, "gpu_types": ["v100"]}))
        with sqlite3.connect(state.path) as conn:
            if args.mib:
                conn.execute("UPDATE jobs SET spec = randomblob(?) WHERE name = 'victim'", (args.mib * 2**20,))
        cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
        server = Server(state, cluster, make_executor("local"), ServeConfig(round_s=0.5, device="cpu"))
        server.acquire()
        times = []
        for _ in range(args.rounds):
            began = time.perf_counter()
            server.round()
            times.append(time.perf_counter() - began)
        rss = int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**20
        print(f"{args.mib} MiB row: rounds {', '.join(f'{t:.3f}' for t in times)} s; RSS after them {rss:.0f} MiB")


if __name__ == "__main__":
    main()
