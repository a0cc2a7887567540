"""CPU and wall time of `sia` on Sia's Philly 1 and Saturn 1 under the earlier models (bootstrap belief, fitted
step times) and the defaults (fitted belief, interpolated step times), alternating, two repetitions (the second
with the goodput models' caches warm). One JSON line per run. Usage: PYTHONPATH=. python scripts/fidelity_speed.py
"""

import json
import time

from scheduler.formats.shared_data import shared_data_dir
from scheduler.formats.workloads import read_workload
from scheduler.model.cluster import load_cluster
from scheduler.sim.config import SimConfig
from scheduler.sim.job_model import simulation_goodput_model
from scheduler.sim.simulator import simulate

W = shared_data_dir() / "sia" / "workloads"
cl = load_cluster("scheduler/examples/sia-64gpu.yaml")
for rep in range(2):
    for wl in ("philly/workload-1", "saturn/workload-1"):
        work = read_workload(W / f"{wl}.csv")
        for tp, st in (("bootstrap", "fitted"), ("fitted", "interpolated")):
            model = simulation_goodput_model(None, applications=work.applications, gpu_types=cl.type_names, step_times=st)
            c0, w0 = time.process_time(), time.time()
            r = simulate(cl, work, "sia", profiles=model, config=SimConfig(throughput=tp, step_times=st))
            print(json.dumps({"rep": rep, "wl": wl, "variant": f"{tp}/{st}", "cpu_s": round(time.process_time() - c0, 2),
                              "wall_s": round(time.time() - w0, 2), "rounds": len(r.rounds),
                              "policy_s": round(float(r.rounds["policy_s"].sum()), 2),
                              "avg_jct_s": r.summary["avg_jct_s"], "restarts": r.summary["restarts"]}), flush=True)
