"""Run our simulator on Sia's workloads under each (throughput belief, step-time model) pair and print one JSON
line per run: average JCT, restarts and mean JCT per application (the figures set beside Sia's simulator in
results/sim/fidelity/NOTES.md).

Usage: PYTHONPATH=. python scripts/fidelity_variants.py WORKLOADS POLICIES VARIANTS [REPLICATES]
  WORKLOADS  comma-separated, relative to <shared data>/sia/workloads, without .csv (philly/workload-1,...)
  POLICIES   comma-separated (sia,gavel)
  VARIANTS   comma-separated THROUGHPUT/STEP_TIMES[/GAVEL_ROUNDS[/RESTART_ON[/SUBSTEPS]]] (fitted/interpolated,
             bootstrap/fitted, fitted/interpolated/refill/shape/1, ...); omitted parts take SimConfig's defaults
  REPLICATES runs per workload (default 1): replicate k has every arrival moved by a seeded draw inside one
             round (``Workload.jittered(k)``; 0 is the trace itself), to tell a real gap from one run's luck
"""

from __future__ import annotations

import json
import sys
import time

from scheduler.formats.shared_data import shared_data_dir
from scheduler.formats.workloads import read_workload
from scheduler.sim.config import SimConfig
from scheduler.sim.simulator import simulate


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4) or (len(argv) == 4 and not argv[3].isdigit()):
        print(__doc__, file=sys.stderr)
        return 2
    root = shared_data_dir() / "sia" / "workloads"
    replicates = int(argv[3]) if len(argv) == 4 else 1
    for workload, rep in ((w, r) for w in argv[0].split(",") for r in range(replicates)):
        work = read_workload(root / f"{workload}.csv").jittered(rep)
        for policy in argv[1].split(","):
            for variant in argv[2].split(","):
                names = ("throughput", "step_times", "gavel_rounds", "restart_on", "substeps")
                parts: list = variant.split("/")
                if len(parts) > 4:
                    parts[4] = int(parts[4])
                config = SimConfig(**dict(zip(names, parts)))
                started, cpu = time.time(), time.process_time()
                result = simulate("scheduler/examples/sia-64gpu.yaml", work, policy, config=config)
                by_app = result.jobs.groupby("application")
                print(json.dumps({"workload": workload, "replicate": rep, "policy": policy,
                                  **{k: getattr(config, k) for k in names},
                                  "avg_jct_h": result.summary["avg_jct_s"] / 3600,
                                  "restarts": result.summary.get("restarts"),
                                  "wall_s": round(time.time() - started, 1),
                                  "cpu_s": round(time.process_time() - cpu, 1),
                                  "per_app_s": by_app["jct_s"].mean().round(0).to_dict(),
                                  "per_app_restarts": {k: int(v) for k, v in by_app["restarts"].sum().items()}}),
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
