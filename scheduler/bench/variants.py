"""``colocate bench variants``: the simulator under named model variants, side by side.

A *variant* is a set of settings (``sim.throughput=bootstrap``, ``ilp.top_k=5``: the keys of ``--set``) over
the defaults. Every (workload, replicate, policy, variant) runs in this process, the variants alternating inside
each repetition so that a machine that slows down mid-run slows every variant alike; the profiles are loaded
once per workload and step-time model, outside the timing. Replicate ``k`` moves every arrival by a seeded draw
inside one round (:meth:`~scheduler.formats.workload_jobs.Workload.jittered`; 0 is the trace itself), to tell a
real gap from one run's luck. This is how the ablations of ``results/sim/`` are measured (fidelity, speed).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scheduler.sim.config import SimConfig


@dataclass(frozen=True)
class Variant:
    """A named model variant: the simulator's config and the ILP policies' options (over their defaults)."""

    name: str
    sim: SimConfig = field(default_factory=SimConfig)
    ilp: Mapping[str, Any] = field(default_factory=dict)


def run_variants(cluster: Path, workloads: Sequence[Path], policies: Sequence[str], variants: Sequence[Variant],
                 replicates: int = 1, repeats: int = 1, profiles: Path | None = None) -> Iterator[dict[str, Any]]:
    """One row per run: average JCT, restarts, rounds, wall and CPU seconds, mean JCT and restarts per
    application."""
    from scheduler.formats.workloads import read_workload
    from scheduler.model.cluster import load_cluster
    from scheduler.policies import policy_spec
    from scheduler.sim.job_model import simulation_goodput_model
    from scheduler.sim.simulator import simulate

    cluster_obj = load_cluster(cluster)
    for path in workloads:
        base = read_workload(path)
        models = {(v.sim.efficiency, v.sim.step_times): simulation_goodput_model(
            profiles, applications=base.applications, gpu_types=cluster_obj.type_names,
            efficiency=v.sim.efficiency, step_times=v.sim.step_times) for v in variants}
        for rep in range(replicates):
            work = base.jittered(rep) if rep else base
            for repeat in range(repeats):
                for policy in policies:
                    for variant in variants:
                        own = policy_spec(policy).ilp  # the variant's ILP changes apply over an ILP policy's own
                        ilp = replace(own, **variant.ilp) if own is not None else None
                        started, cpu = time.time(), time.process_time()
                        result = simulate(cluster_obj, work, policy, config=variant.sim, ilp=ilp,
                                          profiles=models[(variant.sim.efficiency, variant.sim.step_times)])
                        by_app = result.jobs.groupby("application")
                        yield {"workload": f"{path.parent.name}/{path.stem}", "replicate": rep, "repeat": repeat,
                               "policy": policy, "variant": variant.name,
                               "avg_jct_h": result.summary["avg_jct_s"] / 3600,
                               "restarts": int(result.summary["restarts"]), "rounds": len(result.rounds),
                               "wall_s": time.time() - started, "cpu_s": time.process_time() - cpu,
                               "per_app_jct_s": {str(k): round(float(v), 1)
                                                 for k, v in by_app["jct_s"].mean().items()},
                               "per_app_restarts": {str(k): int(v) for k, v in by_app["restarts"].sum().items()}}
