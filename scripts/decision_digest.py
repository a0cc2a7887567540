"""Objectives and a digest of every decision of the round ILP on ``colocate bench scheduler``'s synthetic rounds.

Run on two checkouts to show a change keeps the ILP's behaviour at the defaults (same objective, same
allocations: GPU type, count, batch and partners of every job)::

    (cd OLD && PYTHONPATH=. python scripts/decision_digest.py) > old.txt
    (cd NEW && PYTHONPATH=. python scripts/decision_digest.py) > new.txt && diff old.txt new.txt

Sia's 64/128/256-GPU clusters, 100/300/600 jobs, two seeds, Sia's ILP and colocate's with pairs and with groups
of three; needs Sia's traces (``../shared/data/sia/traces``).
"""

from __future__ import annotations

import hashlib

from scheduler.bench.scheduler import bench_colocation, sia_cluster, synthetic_jobs
from scheduler.formats.profiles import load_goodput_model
from scheduler.formats.shared_data import default_profiles_dir
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.policy import PackingPolicy
from scheduler.model.policy import RoundContext


def main() -> None:
    model = load_goodput_model(default_profiles_dir())
    for gpus, jobs in ((64, 100), (128, 300), (256, 600)):
        cluster = sia_cluster(gpus)
        table, _ = bench_colocation(None, cluster.type_names)
        for seed in (0, 1):
            round_jobs = synthetic_jobs(cluster, model, jobs, seed)
            for packing, size in ((False, 2), (True, 2), (True, 3)):
                decision = PackingPolicy(IlpConfig(packing=packing, max_group_size=size)).allocate(
                    round_jobs, cluster, RoundContext(model, colocation=table))
                chosen = sorted((a.job, a.gpu_type, a.num_gpus, a.batch_size, tuple(a.others))
                                for a in decision.allocations)
                digest = hashlib.sha1((repr(chosen) + repr(sorted(decision.unallocated))).encode()).hexdigest()[:12]
                print(gpus, jobs, seed, packing, size, f"{decision.solver.objective:.9g}", digest)


if __name__ == "__main__":
    main()
