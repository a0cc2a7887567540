"""CPU time of one run with a lone job's goodput read once a round (--substeps 1, earlier) and six times (the
default), `sia` and `gavel` on Sia's Philly 1 and Saturn 1, twice each (profiles loaded once per workload,
outside the timing). One JSON line per run. Usage: PYTHONPATH=. python scripts/bench_substeps.py"""

from __future__ import annotations

import json
import time

from scheduler.formats.shared_data import shared_data_dir
from scheduler.formats.workloads import read_workload
from scheduler.model.cluster import load_cluster
from scheduler.sim.config import SimConfig
from scheduler.sim.job_model import simulation_goodput_model
from scheduler.sim.simulator import simulate


def main() -> None:
    cluster = load_cluster("scheduler/examples/sia-64gpu.yaml")
    for name in ("philly/workload-1", "saturn/workload-1"):
        work = read_workload(shared_data_dir() / "sia" / "workloads" / f"{name}.csv")
        model = simulation_goodput_model(None, applications=work.applications, gpu_types=cluster.type_names,
                                   step_times="interpolated")
        for policy in ("sia", "gavel"):
            for substeps in (1, 6, 1, 6):
                cpu = time.process_time()
                result = simulate(cluster, work, policy, profiles=model, config=SimConfig(substeps=substeps))
                print(json.dumps({"workload": name, "policy": policy, "substeps": substeps,
                                  "cpu_s": round(time.process_time() - cpu, 2), "rounds": len(result.rounds),
                                  "avg_jct_h": round(result.summary["avg_jct_s"] / 3600, 4)}), flush=True)


if __name__ == "__main__":
    main()
