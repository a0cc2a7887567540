"""Results of one simulation: per-job, per-round and per-allocation tables and the summary (``--json``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from common.options import is_option

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

SUMMARY_KEYS = ("policy", "jobs", "completed", "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s", "gpu_hours",
                "utilization", "restarts", "packed_fraction", "triple_fraction", "worst_slowdown", "over_bound_fraction",
                "wall_s")
ROUND_COLUMNS = ("round", "time_s", "active", "running", "waiting", "unplaced", "gpus_busy", "gpu_s", "utilization",
                 "packed_jobs", "packed_gpu_s", "triple_jobs", "triple_gpu_s", "restarts", "completed", "solver", "status",
                 "fallback", "objective", "policy_s")
ALLOCATION_COLUMNS = ("round", "time_s", "job", "gpu_type", "num_gpus", "num_nodes", "batch_size", "partner", "group_size",
                      "nodes", "gpus", "solo_rate", "packed_rate", "restore_s", "progress")


@dataclass
class SimulationResult:
    """Everything one run produced. ``summary`` has exactly :data:`SUMMARY_KEYS` (the ``--json`` schema, to which
    ``simulate --json`` adds the run's ``config``)."""

    policy: str
    workload: str
    summary: dict[str, Any]
    jobs: pd.DataFrame
    rounds: pd.DataFrame
    allocations: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    belief: pd.DataFrame | None = None  # belief vs truth per pair over time (a learning ``--belief`` only)

    def to_json(self) -> dict[str, Any]:
        return {k: self.summary[k] for k in SUMMARY_KEYS}

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``jobs.parquet``, ``rounds.parquet``, ``allocations.parquet``, ``summary.json`` (and
        ``belief.parquet`` when the policy learned its pairs)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {
            "jobs": out / "jobs.parquet", "rounds": out / "rounds.parquet",
            "allocations": out / "allocations.parquet", "summary": out / "summary.json",
        }
        self.jobs.to_parquet(paths["jobs"], index=False)
        self.rounds.to_parquet(paths["rounds"], index=False)
        self.allocations.to_parquet(paths["allocations"], index=False)
        if self.belief is not None:
            paths["belief"] = out / "belief.parquet"
            self.belief.to_parquet(paths["belief"], index=False)
        paths["summary"].write_text(json.dumps({**self.to_json(), "meta": self.meta}, indent=2, default=str) + "\n")
        return paths


def _plain(value: Any) -> Any:
    """A setting as a run's summary.json stores it: a parsed value (``--belief``) as its text."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def build_result(sim: Any, round_rows: list[dict[str, Any]], alloc_rows: list[dict[str, Any]],
                 gpu_s: tuple[float, float, float], wall: float, end_time: float, fallbacks: int) -> SimulationResult:
    """The :class:`SimulationResult` of a finished :class:`scheduler.sim.simulator.Simulator` run; ``gpu_s`` is the
    run's busy GPU-seconds, those with two or more jobs on the GPUs (packed) and those with three (triple)."""
    import pandas as pd

    from scheduler.model.colocation import TRIPLE_RATIOS
    from scheduler.sim.job_state import cluster_bound

    busy_gpu_s, packed_gpu_s, triple_gpu_s = gpu_s
    rows = []
    for st in sorted(sim.states.values(), key=lambda s: (s.spec.arrival, s.spec.name)):
        jct = st.completion - st.spec.arrival if st.completion is not None else float("nan")
        rows.append({
            "job": st.spec.name, "application": st.spec.application, "arrival_s": st.spec.arrival,
            "num_gpus": st.spec.num_gpus, "batch_size": st.spec.batch_size or 0, "work": st.work,
            "start_s": st.start if st.start is not None else float("nan"),
            "completion_s": st.completion if st.completion is not None else float("nan"),
            "jct_s": jct, "completed": st.completion is not None, "restarts": st.restarts,
            "gpu_hours": st.gpu_s / 3600.0, "run_s": st.run_s, "packed_s": st.packed_s,
            "progress": st.done / st.work if st.work else 1.0,
            "slowdown_bound": st.bound if st.bound is not None else float("nan"),
            "worst_slowdown": st.worst_slowdown, "over_bound_s": st.over_bound_s,
        })
    jobs = pd.DataFrame(rows)
    rounds = pd.DataFrame(round_rows, columns=list(ROUND_COLUMNS))
    allocations = pd.DataFrame(alloc_rows, columns=list(ALLOCATION_COLUMNS))
    done = jobs[jobs["completed"]]
    jcts = done["jct_s"].to_numpy(float)
    makespan = float(done["completion_s"].max()) if len(done) == len(jobs) and len(done) else float(end_time)
    summary = {
        "policy": sim.policy.name,
        "jobs": len(jobs),
        "completed": len(done),
        "avg_jct_s": float(np.mean(jcts)) if len(jcts) else float("nan"),
        "p50_jct_s": float(np.percentile(jcts, 50)) if len(jcts) else float("nan"),
        "p99_jct_s": float(np.percentile(jcts, 99)) if len(jcts) else float("nan"),
        "makespan_s": makespan,
        "gpu_hours": busy_gpu_s / 3600.0,
        "utilization": busy_gpu_s / (sim.cluster.total_gpus * makespan) if makespan > 0 else 0.0,
        "restarts": int(jobs["restarts"].sum()) if len(jobs) else 0,
        "packed_fraction": packed_gpu_s / busy_gpu_s if busy_gpu_s > 0 else 0.0,
        "triple_fraction": triple_gpu_s / busy_gpu_s if busy_gpu_s > 0 else 0.0,
        # the truth of every group a job ran in: its worst solo / co-located rate, and the share of all jobs' run
        # time spent slower than each job's own bound (with --belief != truth, where a wrong prior shows)
        "worst_slowdown": float(jobs["worst_slowdown"].max()) if len(jobs) else 1.0,
        "over_bound_fraction": (float(jobs["over_bound_s"].sum() / jobs["run_s"].sum())
                                if len(jobs) and jobs["run_s"].sum() > 0 else 0.0),
        "wall_s": wall,
    }
    meta = {
        "workload": sim.workload.name, "workload_source": sim.workload.source,
        "cluster": sim.cluster.to_dict(), "round_s": sim.config.round_s, "seed": sim.config.seed,
        "adaptive_jobs": sim.adaptive, "rounds": len(round_rows), "solver_fallback_rounds": fallbacks,
        "policy_s_total": float(sum(r["policy_s"] for r in round_rows)),
        "colocation_rows": len(sim.colocation) if sim.colocation is not None else 0,
        "max_group_size": sim.max_group_size,
        "slowdown_bound": cluster_bound(sim.policy),
        "triple_ratios": TRIPLE_RATIOS if sim.max_group_size >= 3 else "none (pairs only)",
        "model": {f.name: _plain(getattr(sim.config, f.name)) for f in fields(sim.config) if is_option(f)},
    }
    learner = sim.learner
    if learner is not None:
        meta["belief"] = {"prior_error_sum": learner.prior_error(), "observations": len(learner.rows)}
    return SimulationResult(str(summary["policy"]), sim.workload.name, summary, jobs, rounds, allocations, meta,
                            learner.frame() if learner is not None else None)
