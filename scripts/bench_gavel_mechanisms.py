"""CPU time of `gavel` under Sia's mechanism (--gavel-rounds sia) and the earlier one (refill), twice each, on
Sia's Philly 1-2 and Saturn 2 (profiles loaded once per workload, outside the timing). One JSON line per run.
Usage: PYTHONPATH=. python scripts/bench_gavel_mechanisms.py (needs the shared data: Sia's workloads and traces)."""

from __future__ import annotations

import json
import time

from scheduler.formats.shared_data import shared_data_dir
from scheduler.formats.workloads import read_workload
from scheduler.model.cluster import load_cluster
from scheduler.sim.config import SimConfig
from scheduler.sim.job_model import simulation_goodput_model
from scheduler.sim.simulator import simulate

WORKLOADS = ("philly/workload-1", "philly/workload-2", "saturn/workload-2")
# the earlier behaviour is refill with the earlier restart rule; Sia's is the default pair
MODES = {"refill": SimConfig(gavel_rounds="refill", restart_on="shape"), "sia": SimConfig()}


def main() -> None:
    cluster = load_cluster("scheduler/examples/sia-64gpu.yaml")
    for name in WORKLOADS:
        work = read_workload(shared_data_dir() / "sia" / "workloads" / f"{name}.csv")
        model = simulation_goodput_model(None, applications=work.applications, gpu_types=cluster.type_names,
                                   step_times="interpolated")
        for mode in ("refill", "sia", "refill", "sia"):
            cpu, wall = time.process_time(), time.perf_counter()
            result = simulate(cluster, work, "gavel", profiles=model, config=MODES[mode])
            print(json.dumps({"workload": name, "mode": mode, "cpu_s": round(time.process_time() - cpu, 2),
                              "wall_s": round(time.perf_counter() - wall, 2),
                              "policy_s": round(float(result.rounds["policy_s"].sum()), 2),
                              "rounds": len(result.rounds)}), flush=True)


if __name__ == "__main__":
    main()
