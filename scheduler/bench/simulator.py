"""``colocate bench simulator``: time to simulate a workload (targets: a 160-job workload in ≤ 10 s, a
1,000-job one in ≤ 2 min, with colocate; Sia's 960-job ``newtrace`` sets stand for the latter).

Runs each policy on each workload in this process, one after the other (one core; the compare command is
what uses several), and prints wall time, simulated rounds, and the per-round policy time (median, p95,
max) so a slow run can be attributed to the policy or to the simulator's own bookkeeping. The Sia profiles
are loaded once before timing (≈2 s, shared by every run of a process).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SIA_CLUSTER = Path(__file__).resolve().parents[1] / "examples" / "sia-64gpu.yaml"
DEFAULT_WORKLOADS = ("sia/workloads/philly/workload-1.csv", "sia/workloads/saturn/workload-1.csv")


def run_benchmark(workloads: list[Path], policies: list[str], cluster: Path, profiles: Path | None) -> list[dict[str, Any]]:
    """One row per (workload, policy): jobs, rounds, wall seconds, policy seconds per round."""
    import time

    import numpy as np

    from scheduler.formats.workloads import read_workload
    from scheduler.model.cluster import load_cluster
    from scheduler.sim.config import SimConfig
    from scheduler.sim.job_model import simulation_goodput_model
    from scheduler.sim.simulator import simulate

    cluster_obj = load_cluster(cluster)
    rows = []
    for path in workloads:
        work = read_workload(path)
        model = simulation_goodput_model(profiles, applications=work.applications, gpu_types=cluster_obj.type_names,
                                   step_times=SimConfig().step_times)
        for policy in policies:
            cpu0 = time.process_time()
            result = simulate(cluster_obj, work, policy, profiles=model)
            cpu = time.process_time() - cpu0
            per_round = result.rounds["policy_s"].to_numpy(float)
            rows.append({
                "workload": f"{path.parent.name}/{path.stem}", "policy": policy, "jobs": len(work),
                "rounds": len(per_round), "wall_s": result.summary["wall_s"], "cpu_s": cpu,
                "policy_s": float(per_round.sum()), "round_median_ms": float(np.median(per_round) * 1e3),
                "round_p95_ms": float(np.percentile(per_round, 95) * 1e3), "round_max_ms": float(per_round.max() * 1e3),
                "avg_jct_h": result.summary["avg_jct_s"] / 3600,
            })
    return rows
