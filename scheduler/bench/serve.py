"""``colocate bench serve``: round latency of the live scheduler with 1,000 queued jobs, split into the policy's
own time and the server's bookkeeping (state reads and writes, learned model and table, placement, diff,
polling live groups).

Sia's 64-GPU cluster, jobs drawn as in ``colocate bench scheduler`` (Sia's six applications and profiles,
70 % adaptive, rigid sizes 1–8 GPUs), each a user command (``sleep``) so the groups that start are real
detached processes polled every round without loading the machine. The first round starts groups (its
enacting time is reported apart); later rounds are the steady state. Everything started is killed at the end.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

from scheduler.formats.profiles import load_goodput_model


def _specs(num_jobs: int, seed: int, cluster: Any, model: Any) -> list[Any]:
    from scheduler.bench.scheduler import synthetic_jobs
    from scheduler.service.jobs.jobspec import JobSpec

    specs = []
    for job in synthetic_jobs(cluster, model, num_jobs, seed):
        curve = model.curves.get(job.application)
        init = curve.init_batch_size if curve else 32
        specs.append(JobSpec(
            name=job.name, command="sleep 3600", application=job.application, steps=10**9,
            batch_size=job.batch_size or init, adaptive=job.adaptive,
            min_batch_size=init if job.adaptive else None,
            max_batch_size=(curve.max_batch_size if curve else init) if job.adaptive else None,
            min_gpus=job.num_gpus, max_gpus=job.max_gpus))
    return specs


def run_serve_benchmark(num_jobs: int = 1000, rounds: int = 5, gpus: int = 64, seed: int = 0,
                        profiles: Path | None = None) -> dict[str, Any]:
    """Submit ``num_jobs`` jobs, run ``rounds`` rounds on the local backend; timings per round and medians."""
    from scheduler.bench.scheduler import bench_colocation, sia_cluster
    from scheduler.executor.registry import make_executor
    from scheduler.formats.shared_data import default_profiles_dir
    from scheduler.service.config import ServeConfig
    from scheduler.service.server import Server
    from scheduler.service.state.store import StateStore

    cluster = sia_cluster(gpus)
    model = load_goodput_model(profiles or default_profiles_dir())
    table, _ = bench_colocation(None, cluster.type_names)
    with tempfile.TemporaryDirectory(prefix="colocate-bench-serve-") as tmp:
        state = StateStore(Path(tmp) / "state")
        for spec in _specs(num_jobs, seed, cluster, model):
            state.submit(spec)
        executor = make_executor("local")
        # rounds are run back to back by this loop, not by the server: round_s only has to be valid
        server = Server(state, cluster, executor, ServeConfig(round_s=1.0, device="cpu", stop_grace_s=5.0),
                        profiles=model, colocation=table)
        stats = []
        try:
            for _ in range(rounds):
                stats.append(server.round())
        finally:
            for group in state.groups().values():
                executor.release(group.handle, group.doc)
        running = len(state.jobs(("running",)))
    steady = stats[1:] or stats
    return {
        "jobs": num_jobs, "gpus": cluster.total_gpus, "rounds": [s.__dict__ for s in stats], "running": running,
        "policy_s_median": statistics.median(s.policy_s for s in steady),
        "bookkeeping_s_median": statistics.median(s.bookkeeping_s for s in steady),
        "bookkeeping_s_max": max(s.bookkeeping_s for s in steady),
        "total_s_median": statistics.median(s.total_s for s in steady),
        "policy_cpu_s_median": statistics.median(s.policy_cpu_s for s in steady),
        "bookkeeping_cpu_s_median": statistics.median(s.bookkeeping_cpu_s for s in steady),
        "bookkeeping_cpu_s_max": max(s.bookkeeping_cpu_s for s in steady),
        "first_round_enact_s": stats[0].enact_s,
    }
